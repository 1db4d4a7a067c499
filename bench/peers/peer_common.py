"""What every JVM peer of bench/peers shares: its jars from Maven Central and its process.

* ``fetch_jars(name, pom)``: the runtime jars of ``pom``, fetched once with
  ``mvn dependency:copy-dependencies`` into ``bench/peers/.cache/<name>/`` (gitignored, with its
  own Maven repository in ``bench/peers/.cache/m2``). A second call finds the manifest and
  downloads nothing; editing the pom fetches again.
* ``JvmProcess``: one JVM in its own process group (a Ctrl-C in the terminal reaches Python,
  whose ``finally`` stops the JVM, and not the JVM directly), its output in a log file.
  ``stop()`` sends SIGTERM (the servers' shutdown hooks run), kills it after a timeout, and is
  idempotent.
* ``free_port()``, ``wait_for_port()``, ``interrupt_on_sigterm`` and ``PeerError``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

__all__ = [
    "CACHE",
    "JvmProcess",
    "PeerError",
    "fetch_jars",
    "free_port",
    "interrupt_on_sigterm",
    "java_command",
    "last_line",
    "progress",
    "wait_for_port",
]

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
STOP_TIMEOUT_S = 30.0


class PeerError(Exception):
    """A peer could not be fetched, started or stopped; the message says which and why."""


def progress(message: str) -> None:
    print(f"peers: {message}", file=sys.stderr, flush=True)


def fetch_jars(name: str, pom: Path, include_artifacts: str | None = None) -> list[Path]:
    """The runtime jars of ``pom`` in ``.cache/<name>``, fetched on the first call only.

    ``include_artifacts``: a comma-separated artifactId list to keep (all when None)."""
    out = CACHE / name
    manifest = out / "manifest.txt"
    if manifest.exists() and manifest.stat().st_mtime >= pom.stat().st_mtime:
        jars = [out / jar for jar in manifest.read_text().split()]
        if all(jar.exists() for jar in jars):
            return jars
    if shutil.which("mvn") is None:
        raise PeerError(
            f"jars: Maven (mvn) is needed once to fetch {pom.name} (Debian: apt-get install maven)"
        )
    progress(f"{name}: resolving {pom.name} from Maven Central into {out} (first run only)")
    tmp = CACHE / f"{name}.tmp.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    command = [
        "mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(pom),
        "dependency:copy-dependencies", "-DincludeScope=runtime",
        f"-DoutputDirectory={tmp}", f"-Dmaven.repo.local={CACHE / 'm2'}",
    ]  # fmt: skip
    if include_artifacts:
        command.append(f"-DincludeArtifactIds={include_artifacts}")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]
        raise PeerError(f"jars: mvn failed for {pom.name} (exit {done.returncode}): {tail[0]}")
    names = sorted(path.name for path in tmp.glob("*.jar"))
    (tmp / "manifest.txt").write_text("".join(f"{jar}\n" for jar in names))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    progress(f"{name}: {len(names)} jars in {out}")
    return [out / jar for jar in names]


def java_command(heap: str, jars: Sequence[Path], *options: str) -> list[str]:
    """``java`` with a fixed heap, G1 and ``jars`` as the class path (no main class yet); the
    product's launch (``rmq_spark.jvm``), with its errors as ``PeerError``."""
    from rmq_spark.errors import EnvironmentCheckError
    from rmq_spark.jvm import java_command as product_java_command

    try:
        return product_java_command(heap, jars, *options)
    except EnvironmentCheckError as err:
        raise PeerError(str(err)) from err


def checkout_env(checkout: Path, **extra: str) -> dict[str, str]:
    """This process's environment with ``checkout`` first on ``PYTHONPATH``: a job or broker
    started from it runs that checkout's ``rmq_spark``, not the one the venv's editable
    install points at (a harness run from an exported tree would otherwise time this one)."""
    path = os.pathsep.join(p for p in (str(checkout), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def job_cpu_s(root: int) -> float:
    """CPU seconds of the process ``root`` and its live descendants (a Spark driver's JVM,
    its Python workers), the children they have reaped (short-lived forks) included."""
    ticks = os.sysconf("SC_CLK_TCK")
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            for children in Path(f"/proc/{pid}/task").glob("*/children"):
                todo.extend(int(child) for child in children.read_text().split())
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile
        total += sum(int(field) for field in fields[11:15])  # utime stime cutime cstime
    return total / ticks


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError as err:
        return f"unreadable: {err}"
    return lines[-1] if lines else "empty"


class JvmProcess:
    """A JVM started in its own process group, output to ``log_path``; ``stop()`` always ends it."""

    def __init__(
        self,
        what: str,
        command: Sequence[str],
        log_path: Path,
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.what = what
        self.log_path = log_path
        self._log: IO[bytes] | None = open(log_path, "wb")  # noqa: SIM115 (closed in stop())
        try:
            self.process: subprocess.Popen[bytes] | None = subprocess.Popen(
                list(command),
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
                cwd=cwd,
            )
        except OSError as err:
            self._log.close()
            raise PeerError(f"{what}: cannot start {command[0]}: {err}") from err

    def check_alive(self) -> None:
        """Raise ``PeerError`` with the log's last line if the JVM has exited."""
        if self.process is not None and self.process.poll() is not None:
            raise PeerError(
                f"{self.what}: exited with {self.process.returncode} "
                f"(log {self.log_path}: {last_line(self.log_path)})"
            )

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM to the process group, SIGKILL after ``timeout_s``. Idempotent."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


def wait_for_port(jvm: JvmProcess, port: int, timeout_s: float) -> None:
    """Wait until ``port`` on 127.0.0.1 accepts connections; ``PeerError`` if the JVM exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        jvm.check_alive()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise PeerError(f"{jvm.what}: not accepting connections on {port} after {timeout_s:.0f} s")


def interrupt_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM handler: raise KeyboardInterrupt, so that ``finally`` blocks stop the peers (a
    JVM is in its own process group and would outlive a Python killed by the signal)."""
    raise KeyboardInterrupt
