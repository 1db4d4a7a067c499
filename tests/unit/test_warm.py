"""Segment warming (``rmq_spark/store/warm.py``): zeros ahead of the writer, never over data."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from rmq_spark.store.codec import BlankPadding, decode_record
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.fileio import MmapFile, OsOpener
from rmq_spark.store.warm import WARM_PIECE_BYTES, SegmentWarmer
from tests.store_helpers import open_store, put_many

SIZE = 1 << 20


def _dirty(path: Path, position: int, length: int) -> None:
    """Fill a range with 0xFF behind the store's back, so that zeros written later show."""
    with path.open("r+b") as handle:
        handle.seek(position)
        handle.write(b"\xff" * length)


def _warmed_log(tmp_path: Path, ahead: int) -> tuple[CommitLog, SegmentWarmer]:
    log = CommitLog.load(tmp_path, SIZE, OsOpener())
    log.segment_for_append(100)  # creates the first segment
    warmer = SegmentWarmer(log, ahead)
    warmer.attach()
    return log, warmer


def test_the_warmer_writes_zeros_ahead_of_the_writer_and_raises_the_limit(tmp_path: Path) -> None:
    log, warmer = _warmed_log(tmp_path, ahead=4 * WARM_PIECE_BYTES)
    segment = log.active
    assert segment is not None and segment.limit == 0
    _dirty(segment.path, 0, SIZE)
    while warmer.warm_once():
        pass
    assert segment.limit >= 2 * WARM_PIECE_BYTES  # at least half the window ahead
    assert segment.read(0, segment.limit) == bytes(segment.limit)
    assert segment.read(segment.limit, 1) == b"\xff"  # nothing past the limit touched
    log.close()


def test_the_writer_raises_the_limit_itself_when_warming_is_behind(tmp_path: Path) -> None:
    log, warmer = _warmed_log(tmp_path, ahead=4 * WARM_PIECE_BYTES)
    segment = log.segment_for_append(300)
    assert segment.limit >= 308  # the record and room for a BLANK
    segment.append(b"r" * 300)
    limit = segment.limit
    while warmer.warm_once():
        pass
    assert segment.read(0, 300) == b"r" * 300  # the warmer started at the limit
    assert segment.limit > limit
    log.close()


def test_records_written_between_warming_steps_are_never_zeroed(tmp_path: Path) -> None:
    """Interleave appends and warming steps deterministically; every record must survive.
    Fails if an append does not raise the limit first (the warmer would zero it)."""
    log, warmer = _warmed_log(tmp_path, ahead=2 * WARM_PIECE_BYTES)
    written: list[tuple[int, bytes]] = []
    for index in range(3000):
        data = bytes([index % 251 + 1]) * (100 + index % 900)
        segment = log.segment_for_append(len(data))
        written.append((segment.base_offset + segment.append(data), data))
        if index % 7 == 0:
            warmer.warm_once()
    assert len(log.segments) > 1  # rolled: the BLANK and the new segment went below the limit
    for offset, data in written:
        assert log.read(offset, len(data)) == data
    ends = {offset + len(data) for offset, data in written}
    for segment in log.segments[:-1]:  # each ends with its BLANK record, intact
        last_end = max(end for end in ends if end <= segment.end_offset)
        position = last_end - segment.base_offset
        blank = decode_record(segment.read(position, 8), 0)
        assert blank == BlankPadding(0, segment.size_bytes - position)
    log.close()


def test_a_new_segment_starts_unwarmed_and_the_warmer_follows_the_roll(tmp_path: Path) -> None:
    log, warmer = _warmed_log(tmp_path, ahead=2 * WARM_PIECE_BYTES)
    first = log.active
    assert first is not None
    first.append(b"x" * (SIZE - 100))
    second = log.segment_for_append(200)
    assert second is not first and second.limit >= 208
    _dirty(second.path, 1000, 64)
    while warmer.warm_once():
        pass
    assert second.limit > 208
    assert second.read(1000, 64) == bytes(64)
    log.close()


def test_a_sync_store_warms_and_keeps_every_acknowledged_message(tmp_path: Path) -> None:
    store = open_store(
        tmp_path,
        flush_policy=FlushPolicy.SYNC,
        segment_size_bytes=SIZE,
        warm_ahead_bytes=256 * 1024,
    )
    warmer = store._warmer  # noqa: SLF001 - what the store started
    assert warmer is not None
    results: list = []
    lock = threading.Lock()

    def producer(index: int) -> None:
        got = put_many(store, 300, body_size=200, queue_id=index)
        with lock:
            results.extend(got)

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert warmer.warmed_bytes > 0
    for result in results:
        assert store.read(result.physical_offset).body[:8] == b"message-"
    store.close()
    reopened = open_store(tmp_path, segment_size_bytes=SIZE)
    assert reopened.max_offset == max(r.physical_offset + r.total_size for r in results)
    reopened.close()


def test_async_stores_and_zero_ahead_do_not_warm(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.ASYNC)
    assert store._warmer is None  # noqa: SLF001
    store.close()
    store = open_store(tmp_path / "b", flush_policy=FlushPolicy.SYNC, warm_ahead_bytes=0)
    assert store._warmer is None  # noqa: SLF001
    put_many(store, 10)
    store.close()


def test_a_failing_warmer_gives_the_writer_whole_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, warmer = _warmed_log(tmp_path, ahead=2 * WARM_PIECE_BYTES)
    segment = log.active
    assert segment is not None

    def broken(self: MmapFile, position: int, length: int, piece: int) -> None:
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(MmapFile, "write_zeros", broken)
    warmer.start()
    warmer._thread.join(timeout=10)  # noqa: SLF001 - it stops on the error
    assert log.warm_lock is None
    assert segment.limit == segment.size_bytes
    warmer.stop()
    log.close()


def test_warm_ahead_must_not_be_negative(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="warm_ahead_bytes"):
        StoreConfig(root_dir=tmp_path, warm_ahead_bytes=-1)
