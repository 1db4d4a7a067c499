"""Starting Apache RocketMQ's Java programs: the one owner of how their JVM is launched.

``run_in_foreground`` runs one as this process's foreground job: output to a file, stopped
with SIGTERM when this process gets SIGTERM or SIGINT (Ctrl-C), its exit status returned.

Used by ``rmq-spark namesrv`` / ``rmq-spark mqadmin`` and by bench/peers' RocketMQ peer.
``java_command`` is ``java`` (Java 17+, found as ``envcheck.check_java`` finds it) with a
fixed heap, G1, the ``--add-opens`` RocketMQ's own start scripts pass on Java 9+ and a class
path. ``rocketmq_home_options`` keeps everything RocketMQ writes under ``user.home`` (its logs
in ``logs/rocketmqlogs/``, the name server's ``namesrv/kvConfig.json``) in one work directory.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from rmq_spark.envcheck import check_java
from rmq_spark.errors import BrokerError

__all__ = [
    "MQADMIN_MAIN",
    "NAMESRV_MAIN",
    "ROCKETMQ_JAVA_OPENS",
    "ROCKETMQ_VERSION",
    "java_command",
    "last_line",
    "port_accepts",
    "rocketmq_env",
    "rocketmq_home_options",
    "run_in_foreground",
]

STOP_TIMEOUT_S = 30.0  # a JVM not gone this long after SIGTERM is killed
ROCKETMQ_VERSION = "5.3.3"  # the pin of scripts/rocketmq-jars.pom.xml
NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
MQADMIN_MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
# RocketMQ's scripts open these on Java 9+ (its mmap cleaner and Netty reach into them).
ROCKETMQ_JAVA_OPENS = tuple(
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in ("java.nio", "sun.nio.ch", "java.lang", "java.util", "jdk.internal.misc")
)


def java_command(heap: str, jars: Sequence[Path], *options: str) -> list[str]:
    """``java`` with a fixed heap, G1 and ``jars`` as the class path (no main class yet).

    Raises ``EnvironmentCheckError`` without a Java 17+."""
    java = check_java().executable
    classpath = os.pathsep.join(str(jar) for jar in jars)
    return [java, f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            *options, "-cp", classpath]  # fmt: skip


def rocketmq_home_options(workdir: Path) -> tuple[str, ...]:
    """JVM options that put RocketMQ's home, logs and state under ``workdir``."""
    return (*ROCKETMQ_JAVA_OPENS, f"-Duser.home={workdir}", f"-Drocketmq.home.dir={workdir}")


def rocketmq_env(workdir: Path) -> dict[str, str]:
    """The environment for a RocketMQ JVM: ``ROCKETMQ_HOME`` (NamesrvStartup refuses to start
    without it) at ``workdir``."""
    return {**os.environ, "ROCKETMQ_HOME": str(workdir), "RMQ_PROXY_HOME": str(workdir)}


def run_in_foreground(
    command: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    output: Path,
    ready: Callable[[], bool] | None = None,
    on_ready: Callable[[int], None] | None = None,
    ready_timeout_s: float = 60.0,
) -> int:
    """Run ``command`` until it exits; SIGTERM or SIGINT to this process is passed on to it as
    SIGTERM (a JVM's shutdown hooks then run) and waited for. Returns 0 for a stop that we
    asked for, else the program's own exit status. Its stdout and stderr go to ``output``.

    ``ready`` is polled until true (``on_ready(pid)`` is then called); raises ``BrokerError``
    if the program exits or ``ready_timeout_s`` passes first, with the last line of ``output``.
    """
    stop_asked: list[int] = []
    with open(output, "wb") as out:
        process = subprocess.Popen(
            list(command), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,  # our signal handler decides
            preexec_fn=_stop_with_parent,
        )  # fmt: skip

    def forward(signum: int, _frame: object) -> None:
        stop_asked.append(signum)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if ready is not None:
            _wait_ready(process, ready, ready_timeout_s, output, stop_asked)
            if on_ready is not None and not stop_asked:
                on_ready(process.pid)
        status = process.wait()
    except BaseException:
        _kill(process)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stop_asked and status in (0, 128 + signal.SIGTERM, -signal.SIGTERM):
        return 0
    return status


def _stop_with_parent() -> None:
    """In the child: SIGTERM when this process dies, even by SIGKILL (Linux ``prctl``), so
    that a killed ``rmq-spark namesrv`` leaves no name server behind."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _wait_ready(
    process: subprocess.Popen[bytes],
    ready: Callable[[], bool],
    timeout_s: float,
    output: Path,
    stop_asked: list[int],
) -> None:
    deadline = time.monotonic() + timeout_s
    while not stop_asked and not ready():
        if process.poll() is not None:
            raise BrokerError(
                f"the JVM exited with {process.returncode} before it was ready "
                f"(last line of {output}: {last_line(output)})"
            )
        if time.monotonic() > deadline:
            _kill(process)
            raise BrokerError(f"not ready after {timeout_s:.0f} s (see {output})")
        time.sleep(0.2)


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def last_line(path: Path) -> str:
    """The last non-empty line of a log file (``"empty"``, or why it cannot be read)."""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError as err:
        return f"unreadable: {err}"
    return lines[-1].strip() if lines else "empty"


def port_accepts(host: str, port: int) -> bool:
    """True when ``host:port`` accepts a TCP connection now."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False
