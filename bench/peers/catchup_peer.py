"""A slave's catch-up seen from its files, the same way for our pair and RocketMQ's (issue 31).

RocketMQ's master starts an empty slave at the beginning of its **last** CommitLog file (a
slave's first report of 0 means ``maxOffset - maxOffset % mappedFileSizeCommitLog``, see
spec/REMOTING_PROTOCOL.md's HA section), so a pair can only be compared on a slave that
already holds the log's start: each slave is seeded with the master's first segment, and what
is timed is the copy of the rest.

``CopyWatch`` polls the slave's CommitLog files (``pread``, the page cache) every few
milliseconds: the moment the first byte past the seed lands, the moment the master's last
bytes do, and the slave process's CPU (every thread, from ``/proc``) between the two. Neither
broker is asked anything, so the measure is the same for a Python and a Java slave.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from produce_cases import broker_cpu_s
from rocketmq_peer import RocketMQBroker

_POLL_S = 0.002
_TAIL_BYTES = 64


def segment_path(log: Path, offset: int, segment_bytes: int) -> Path:
    return log / f"{offset - offset % segment_bytes:020d}"


def seed_first_segment(master_log: Path, slave_store: Path) -> None:
    """Give ``slave_store`` the master's first CommitLog file, as a slave that has it."""
    (slave_store / "commitlog").mkdir(parents=True)
    first = min(master_log.iterdir())
    shutil.copyfile(first, slave_store / "commitlog" / first.name)


class CopyWatch:
    """A thread timing the bytes ``[start, end)`` of ``master_log`` landing in ``slave_log``."""

    def __init__(self, master_log: Path, slave_log: Path, span: tuple[int, int],
                 segment_bytes: int, pid_of: Callable[[], int]) -> None:  # fmt: skip
        self._slave_log, self._segment = slave_log, segment_bytes
        self._start, self._end = span
        tail_at = max(self._end - _TAIL_BYTES, self._end - 1 - (self._end - 1) % segment_bytes)
        self._tail_at = tail_at
        with segment_path(master_log, tail_at, segment_bytes).open("rb") as handle:
            self._tail = os.pread(handle.fileno(), self._end - tail_at, tail_at % segment_bytes)
        self._pid_of = pid_of
        self.first_s = self.last_s = self.first_cpu_s = self.last_cpu_s = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True, name="copy-watch")

    def start(self) -> None:
        self._thread.start()

    def wait(self, timeout_s: float) -> dict:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise SystemExit(f"the slave did not copy up to offset {self._end} in {timeout_s} s")
        seconds = self.last_s - self.first_s
        copied = self._end - self._start
        cpu_s = self.last_cpu_s - self.first_cpu_s
        return {"bytes": copied, "seconds": seconds, "mb_s": copied / seconds / 1e6,
                "cpu_s_per_gib": cpu_s / (copied / (1 << 30))}  # fmt: skip

    def _landed(self, offset: int, expected: bytes) -> bool:
        path = segment_path(self._slave_log, offset, self._segment)
        try:
            with path.open("rb") as handle:
                got = os.pread(handle.fileno(), len(expected) or 8, offset % self._segment)
        except FileNotFoundError:
            return False
        return got == expected if expected else got not in (b"", bytes(len(got)))

    def _run(self) -> None:
        while not self._landed(self._start, b""):  # a record's first bytes: never zero
            time.sleep(_POLL_S)
        self.first_s, self.first_cpu_s = time.perf_counter(), self._cpu_s()
        while not self._landed(self._tail_at, self._tail):
            time.sleep(_POLL_S)
        self.last_s, self.last_cpu_s = time.perf_counter(), self._cpu_s()

    def _cpu_s(self) -> float:
        return broker_cpu_s([self._pid_of()])  # the slave is running: it wrote the bytes


def rocketmq_catch_up(work: Path, master_store: Path, end: int, segment_bytes: int) -> dict:
    """A RocketMQ 5.3.3 master (ASYNC_MASTER, ASYNC_FLUSH) over ``master_store`` and a RocketMQ
    slave seeded with its first segment: the copy of the rest, from the slave's files."""
    slave_store = work / "rslave"
    seed_first_segment(master_store / "commitlog", slave_store)
    sized = {"mappedFileSizeCommitLog": segment_bytes}
    master = RocketMQBroker(proxy=False, store_dir=master_store, flush="ASYNC_FLUSH",
                            broker_properties=sized, heap="1g")  # fmt: skip
    try:
        with master:
            slave = RocketMQBroker(
                proxy=False, namesrv_addr=master.namesrv_addr, store_dir=slave_store,
                flush="ASYNC_FLUSH", heap="1g",
                broker_properties={**sized, "brokerRole": "SLAVE", "brokerId": 1},
            )  # fmt: skip
            span = (segment_bytes, end)
            watch = CopyWatch(master_store / "commitlog", slave_store / "commitlog", span,
                              segment_bytes, lambda: slave.broker_pid)  # fmt: skip
            watch.start()
            with slave:
                return watch.wait(600)
    finally:
        shutil.rmtree(slave_store, ignore_errors=True)
