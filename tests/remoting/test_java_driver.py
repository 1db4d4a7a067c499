"""The Java driver harness itself: a driver that never starts (its lock busy past the
deadline) leaves no process behind. A ``flock`` left waiting would take the bench lock once
it is free and run a JVM that waits on its stdin forever, holding the lock: every later test
that needs the lock would hang (seen in a full run while benchmarks held the lock)."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest
from java_driver import Driver


def _processes_naming(text: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:  # the process ended meanwhile
            continue
    return found


def test_a_driver_that_never_starts_leaves_no_process_behind(tmp_path: Path) -> None:
    lock = tmp_path / "driver.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(AssertionError, match="the JVM to start"):
            Driver([], "127.0.0.1:1", tmp_path, lock=str(lock), start_timeout_s=1)
        assert _processes_naming(str(lock)) == []
