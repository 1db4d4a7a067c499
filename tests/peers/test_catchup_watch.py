"""``catchup_peer.CopyWatch``, the replication bench's clock for either broker's slave: it
starts at the first byte past the seed and stops at the master's last bytes, read from files
(here written by a thread standing in for a slave, segment by segment, in steps)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from catchup_peer import CopyWatch, seed_first_segment, segment_path

SEGMENT = 1 << 16


def _master(log: Path, segments: int) -> bytes:
    log.mkdir(parents=True)
    data = os.urandom(SEGMENT * segments)
    for base in range(0, len(data), SEGMENT):
        (log / f"{base:020d}").write_bytes(data[base : base + SEGMENT])
    return data


def _copy_as_a_slave(data: bytes, slave_log: Path, start: int, pause_s: float) -> None:
    """Write ``data[start:]`` into ``slave_log``'s zero-filled segments, 4 KiB at a time."""
    for at in range(start, len(data), 4096):
        path = segment_path(slave_log, at, SEGMENT)
        if not path.exists():
            path.write_bytes(bytes(SEGMENT))  # preallocated, as RocketMQ's mapped files are
        with path.open("r+b") as handle:
            os.pwrite(handle.fileno(), data[at : at + 4096], at % SEGMENT)
        time.sleep(pause_s)


def test_the_watch_times_from_the_first_byte_past_the_seed_to_the_masters_last(
    tmp_path: Path,
) -> None:
    data = _master(tmp_path / "master" / "commitlog", 3)
    end = len(data) - 100  # the log ends inside its last segment
    seed_first_segment(tmp_path / "master" / "commitlog", tmp_path / "slave")
    slave_log = tmp_path / "slave" / "commitlog"
    assert (slave_log / f"{0:020d}").read_bytes() == data[:SEGMENT]
    watch = CopyWatch(tmp_path / "master" / "commitlog", slave_log, (SEGMENT, end), SEGMENT,
                      os.getpid)  # fmt: skip
    watch.start()
    time.sleep(0.2)  # nothing past the seed yet: the clock must not have started
    copier = threading.Thread(target=_copy_as_a_slave, args=(data[:end], slave_log, SEGMENT, 0.002))
    began = time.perf_counter()
    copier.start()
    result = watch.wait(60)
    copier.join()
    assert watch.first_s >= began
    assert watch.last_s >= watch.first_s
    assert result["bytes"] == end - SEGMENT
    assert result["seconds"] >= 0.002 * ((end - SEGMENT) // 4096 - 1)  # the copy's own pauses
    assert result["cpu_s_per_gib"] >= 0
