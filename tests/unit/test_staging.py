"""Staged segments (``Segment.start_staging``): SYNC appends go to memory, each flush writes
them to the file before its fsync."""

from __future__ import annotations

import errno
import threading
import time
from pathlib import Path

import pytest
from store_helpers import open_store, put_many

from rmq_spark.store.config import FlushPolicy
from rmq_spark.store.fileio import FaultPlan, FaultyFile, FileKind, OsOpener
from rmq_spark.store.segment import Segment

SIZE = 4096


def _segment(tmp_path: Path, opener: OsOpener | None = None) -> Segment:
    opener = opener or OsOpener()
    return Segment(0, opener.create(tmp_path / f"{0:020d}", SIZE, FileKind.SEGMENT))


def _file_bytes(tmp_path: Path, start: int, end: int) -> bytes:
    return (tmp_path / f"{0:020d}").read_bytes()[start:end]


def test_staged_appends_are_readable_at_once_and_reach_the_file_at_commit(tmp_path: Path) -> None:
    segment = _segment(tmp_path)
    segment.append(b"before")  # not staged: straight into the file
    segment.start_staging()
    assert segment.stage is not None and segment.mapping is segment.stage
    segment.append(b"staged-1")
    segment.append(b"staged-2")
    assert segment.read(0, 22) == b"beforestaged-1staged-2"  # across the staging start
    assert segment.read(6, 8) == b"staged-1"
    assert _file_bytes(tmp_path, 0, 22) == b"before" + bytes(16)
    assert segment.commit() == 22
    assert _file_bytes(tmp_path, 0, 22) == b"beforestaged-1staged-2"
    assert segment.committed_position == 22
    segment.append(b"more")
    assert segment.flush() == 26  # flush commits, then fsyncs
    assert _file_bytes(tmp_path, 22, 26) == b"more" and segment.flushed_position == 26
    segment.close()


def test_a_full_segment_releases_its_stage_once_committed(tmp_path: Path) -> None:
    segment = _segment(tmp_path)
    segment.start_staging()
    segment.append(b"r" * 100)
    segment.append_blank()
    assert segment.is_full and segment.stage is not None
    segment.flush()
    assert segment.stage is None and segment.mapping is None
    assert segment.read(0, 100) == b"r" * 100  # from the file now
    assert _file_bytes(tmp_path, 100, 104) == (SIZE - 100).to_bytes(4, "big")
    segment.close()


def test_truncating_a_staged_segment_zeroes_the_stage_and_the_file(tmp_path: Path) -> None:
    segment = _segment(tmp_path)
    segment.start_staging()
    segment.append(b"a" * 50)
    segment.commit()
    segment.append(b"b" * 50)
    segment.truncate_to(30)
    assert segment.write_position == 30 and segment.committed_position == 30
    assert segment.read(0, 100) == b"a" * 30 + bytes(70)
    segment.append(b"c" * 10)
    segment.flush()
    assert _file_bytes(tmp_path, 0, 100) == b"a" * 30 + b"c" * 10 + bytes(60)
    segment.close()


def test_a_commit_that_fails_raises_and_commits_nothing(tmp_path: Path) -> None:
    plan = FaultPlan("append", error=errno.ENOSPC)
    file = FaultyFile(OsOpener().create(tmp_path / f"{0:020d}", SIZE, FileKind.SEGMENT), plan)
    segment = Segment(0, file)
    segment.start_staging()
    segment.append(b"x" * 10)  # into memory: cannot fail
    with pytest.raises(OSError, match="injected failure at append"):
        segment.flush()
    assert segment.committed_position == 0 and segment.flushed_position == 0
    segment.close()


def test_sync_stores_stage_and_async_stores_do_not(tmp_path: Path) -> None:
    sync = open_store(tmp_path / "s", flush_policy=FlushPolicy.SYNC)
    put_many(sync, 3)
    assert sync.commitlog.active is not None and sync.commitlog.active.stage is not None
    sync.close()
    off = open_store(tmp_path / "o", flush_policy=FlushPolicy.SYNC, stage_writes=False)
    put_many(off, 3)
    assert off.commitlog.active is not None and off.commitlog.active.stage is None
    off.close()
    unsynced = open_store(tmp_path / "a", flush_policy=FlushPolicy.ASYNC)
    put_many(unsynced, 3)
    assert unsynced.commitlog.active is not None and unsynced.commitlog.active.stage is None
    unsynced.close()


def test_acknowledged_sync_puts_survive_a_crash_of_a_staged_store(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC, segment_size_bytes=1 << 12)
    results = put_many(store, 60)  # several segments, each staged then released
    store.abandon()  # like SIGKILL: only what the fsyncs committed is in the files
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC, segment_size_bytes=1 << 12)
    assert not store.recovery_report.clean_shutdown
    for result in results:
        assert store.read(result.physical_offset).physical_offset == result.physical_offset
    store.close()


def test_an_fsync_writes_no_append_staged_after_its_commit_was_announced(tmp_path: Path) -> None:
    """A SYNC master's slave is woken by ``on_committed`` for every byte written to the file:
    a record appended between a flush's commit and its fsync waits for the next commit."""
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC, stage_writes=True)
    announced: list[int] = []
    late: list[threading.Thread] = []

    def on_committed() -> None:
        announced.append(store.commitlog.committed_offset)
        if not late:  # the first flush, between its commit and its fsync: one more put
            put = threading.Thread(target=put_many, args=(store, 1), kwargs={"start": 1})
            late.append(put)
            put.start()
            deadline = time.monotonic() + 10
            while store.max_offset == announced[0] and time.monotonic() < deadline:
                time.sleep(0.001)
            assert store.max_offset > announced[0], "the late put never appended"

    store.commitlog.on_committed = on_committed
    put_many(store, 1)
    late[0].join(10)
    assert not late[0].is_alive()
    assert len(announced) == 2 and announced[-1] == store.commitlog.committed_offset
    assert store.flushed_offset == store.max_offset
    store.close()
