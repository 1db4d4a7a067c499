"""``ConsumeDriver.java`` (RocketMQ 4.9.8's client, ``java4.py``'s jars) as a subprocess driven
line by line: one JVM for every scenario of a test module, under the machine-wide bench lock."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rmq_spark.jvm import java_command

LOCK = "/tmp/bench.lock"


class Driver:
    """The running JVM: ``do(command)`` waits for its OK; every output line is kept."""

    def __init__(
        self,
        class_path: Sequence[Path],
        namesrv: str,
        home: Path,
        main: str = "ConsumeDriver",
        lock: str | None = LOCK,  # None: the caller already holds the bench lock
        start_timeout_s: float = 600,  # the bench lock may be another suite's for a while
    ) -> None:
        options = (f"-Duser.home={home}", "-Drocketmq.client.rebalance.waitInterval=1000")
        # flock -o: the lock is flock's own, not inherited by the JVM, so a JVM left behind
        # cannot hold it; the process group lets a failed start kill both
        locked = ["flock", "-o", lock] if lock else []
        command = [*locked, *java_command("256m", class_path, *options), main, namesrv]
        env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=env, cwd=home, start_new_session=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self.wait(lambda lines: "READY" in lines, start_timeout_s, "the JVM to start")
        except BaseException:
            self.kill()
            raise

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def wait(self, predicate: Callable[[list[str]], Any], deadline_s: float, what: str) -> Any:
        end = time.monotonic() + deadline_s
        while True:
            lines = self.snapshot()
            found = predicate(lines)
            if found:
                return found
            if self.proc.poll() is not None or time.monotonic() > end:
                tail = "\n".join(lines[-40:])
                raise AssertionError(f"waiting for {what}; JVM output ends:\n{tail}")
            time.sleep(0.1)

    def do(self, command: str, deadline_s: float = 120) -> list[str]:
        """Run one command; the lines it printed up to its OK."""
        verb = command.split()[0]
        start = len(self.snapshot())
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

        def answered(lines: list[str]) -> list[str] | None:
            for i in range(start, len(lines)):
                if lines[i].startswith(f"ERR {verb}"):
                    raise AssertionError(f"{command}: {lines[i]}")
                if lines[i] == f"OK {verb}":
                    return lines[start : i + 1]
            return None

        return self.wait(answered, deadline_s, command)

    def received(self, consumer: str) -> list[list[str]]:
        """RECV lines of ``consumer``: [topic, queue, offset, reconsumes, body, msgId]."""
        return [
            line.split()[2:] for line in self.snapshot() if line.startswith(f"RECV {consumer} ")
        ]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.do("quit", 60)
            except (AssertionError, BrokenPipeError):
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL flock and the JVM (one process group)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
