"""OPTIMIZE of the reput tables in a process of its own, at a low CPU priority.

OPTIMIZE rewrites every small file of a table: tens of seconds to minutes of CPU. Run in the
reput job's own JVM, even in a thread of its own, it took one of two cores from the stream and
shared its heap and collector, and the stream's commits took 4-5x their usual time
(BENCHMARKS.md, "Beside OPTIMIZE"). Here it runs in a child Python process with a local Spark
session of its own, niced (at the lowest niceness, in the idle scheduling class) before its
JVM starts, so the JVM and all its threads yield each contended core, and it is paused while
the stream writes a batch (``PauseSwitch``). The stream's commits already cope with another
writer on the same tables (``delta_append.py``), and OPTIMIZE changes no data, so nothing is
shared but the files.

The child exits when its parent does, so a killed job leaves no orphan JVM behind. It reports
its result as one JSON line on stdout; its own output goes to the parent's log at DEBUG.

Does not own what OPTIMIZE does (``tables.optimize_tables``) nor when it runs
(``reput_maintenance.py``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from subprocess import PIPE

from rmq_spark.errors import EnvironmentCheckError, TableError

__all__ = [
    "LOWEST_PRIORITY",
    "PauseSwitch",
    "lower_priority",
    "main",
    "optimize_in_own_process",
]

log = logging.getLogger("rmq_spark.reput")

LOWEST_PRIORITY = 19  # the highest niceness: the scheduler's weight 15 against a stream's 1024
PARENT_POLL_S = 1.0
# A child of a pyspark driver must start a JVM of its own: with these set, pyspark would
# connect to the parent's gateway instead, and the submit arguments may name a cluster.
_PARENT_SPARK_ENV = ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "PYSPARK_SUBMIT_ARGS")


def optimize_in_own_process(
    tables_dir: str | Path,
    *,
    niceness: int = LOWEST_PRIORITY,
    jars: str = "",
    switch: PauseSwitch | None = None,
) -> dict[str, int]:
    """OPTIMIZE each table under ``tables_dir`` in a child process at ``niceness`` (0-19);
    returns the files removed per table. ``jars``: the parent session's ``spark.jars``, so
    the child finds Delta where the parent did; ``switch`` pauses it while it runs.

    Raises
    ------
    TableError
        OPTIMIZE failed or the child could not run; one line, naming the table when known.
    """
    command = [sys.executable, "-m", __name__, str(tables_dir), "--niceness", str(niceness)]
    command += ["--parent-pid", str(os.getpid())]
    if jars:
        command += ["--jars", jars]
    started = time.monotonic()
    switch = switch or PauseSwitch()
    process = subprocess.Popen(  # a process group of its own, for PauseSwitch
        command, env=_child_env(), stdout=PIPE, stderr=PIPE, text=True, process_group=0
    )
    switch.attach(process)
    try:
        stdout, stderr = process.communicate()
    finally:
        switch.attach(None)
    log.debug("reput: OPTIMIZE process output:\n%s", stderr)
    result = _result(stdout)
    if "error" in result or process.returncode != 0:
        reason = result.get("error") or _last_line(stderr) or f"exit {process.returncode}"
        raise TableError(f"OPTIMIZE in its own process failed: {reason}")
    log.debug("reput: OPTIMIZE process took %.1f s", time.monotonic() - started)
    return {name: int(count) for name, count in result["removed"].items()}


def _child_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in _PARENT_SPARK_ENV}
    package_root = str(Path(__file__).resolve().parents[2])  # so `-m` finds this package
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    return env


def _result(stdout: str) -> dict:
    line = _last_line(stdout)
    try:
        result = json.loads(line) if line else {}
    except json.JSONDecodeError:
        return {"error": f"unreadable result {line[:200]!r}"}
    return result if isinstance(result, dict) else {"error": f"unreadable result {line[:200]!r}"}


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _one_line(message: str, max_chars: int = 500) -> str:
    """A py4j error's call and its Java exception's first line, without the stack trace."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    text = " ".join([line for line in lines if not line.startswith("at ")][:2])
    return text[:max_chars]


def lower_priority(niceness: int) -> None:
    """Run this process and what it starts at ``niceness`` (never above the current one); at
    ``LOWEST_PRIORITY`` in Linux's idle scheduling class too, whose tasks any other task that
    wakes preempts at once. It stays in the job's session, which Linux's autogroups weigh as
    one: it yields to the job's threads and takes from other sessions only the job's share."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, max(current, min(niceness, LOWEST_PRIORITY)))
    if niceness >= LOWEST_PRIORITY and hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


class PauseSwitch:
    """Stops and continues a running OPTIMIZE process (its process group: the child and its
    JVM) while the stream writes a batch.

    No CPU priority keeps OPTIMIZE from slowing the stream on a small machine: beside a stream
    of 2,000 msgs/s on two cores, even two busy loops in the idle scheduling class, in a
    niced session of their own, took its p99 from 0.8 s to 1.8 s (BENCHMARKS.md). Paused, it
    uses no CPU at all while a batch runs. The process group stays in the job's session: if
    the job dies while it is stopped, the kernel continues it with a SIGHUP (an orphaned
    process group), which ends it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self._paused = False
        self.ended = False  # end() was called: the process's failure is the job's doing

    def end(self) -> None:
        """End the process (the job is stopping): OPTIMIZE commits all or nothing, and the
        files it rewrote without committing them are VACUUM's."""
        with self._lock:
            self.ended = True
            process = self._process
            if process is None or process.poll() is not None:
                return
            for signum in (signal.SIGTERM, signal.SIGCONT):  # a stopped one gets it on SIGCONT
                try:
                    os.killpg(process.pid, signum)
                except ProcessLookupError:
                    return
            self._paused = False

    def attach(self, process: subprocess.Popen[str] | None) -> None:
        with self._lock:
            self._process, self._paused = process, False

    def pause(self) -> None:
        self._signal(signal.SIGSTOP, paused=True)

    def resume(self) -> None:
        self._signal(signal.SIGCONT, paused=False)

    def _signal(self, signum: int, *, paused: bool) -> None:
        # Under the lock: a process reaped meanwhile could hand its group id to another.
        with self._lock:
            process = self._process
            if process is None or self._paused == paused or process.poll() is not None:
                return
            try:
                os.killpg(process.pid, signum)
            except ProcessLookupError:
                return
            self._paused = paused


def _exit_with(parent_pid: int) -> None:
    """End this process (and so its JVM, which exits when its stdin closes) once the parent
    is gone: a job killed mid-OPTIMIZE leaves nothing running."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _optimize(tables_dir: str, jars: str) -> dict[str, int]:
    from rmq_spark.spark.config import SparkConfig
    from rmq_spark.spark.session import build_session
    from rmq_spark.spark.tables import optimize_tables

    config = SparkConfig(
        master="local[2]", app_name="rmq-spark-optimize", catalog="in-memory", log_level="ERROR"
    )
    spark = build_session(config, extra_conf={"spark.jars": jars} if jars else None)
    try:
        return optimize_tables(spark, tables_dir)
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__name__}",
        description="OPTIMIZE the reput tables under TABLES_DIR (run by the reput job).",
    )
    parser.add_argument("tables_dir")
    parser.add_argument("--niceness", type=int, default=LOWEST_PRIORITY)
    parser.add_argument("--parent-pid", type=int, default=0, help="exit when it is gone")
    parser.add_argument("--jars", default="", help="the parent session's spark.jars")
    args = parser.parse_args(argv)
    lower_priority(args.niceness)  # before the JVM starts: it and its threads inherit it
    if args.parent_pid:
        _exit_with(args.parent_pid)
    try:
        result: dict = {"removed": _optimize(args.tables_dir, args.jars)}
    except (TableError, EnvironmentCheckError) as err:
        result = {"error": _one_line(str(err)) or type(err).__name__}
    print(json.dumps(result), flush=True)
    return 0 if "removed" in result else 2


if __name__ == "__main__":
    sys.exit(main())
