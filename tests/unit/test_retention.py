from __future__ import annotations

from pathlib import Path

from store_helpers import open_store, put_many, segment_paths

from rmq_spark.clock import ManualClock
from rmq_spark.errors import OffsetOutOfRangeError
from rmq_spark.store.retention import deletable_segment_count, disk_used_ratio

HOUR_MS = 3_600_000


def test_only_expired_segments_count_oldest_first() -> None:
    closed = [0, 5 * HOUR_MS, 1 * HOUR_MS]
    count = deletable_segment_count(
        closed, 6 * HOUR_MS, file_reserved_time_hours=2, disk_full=False, delete_file_batch_max=10
    )
    assert count == 1  # the second is not expired, so the third waits too


def test_unknown_close_time_is_kept() -> None:
    count = deletable_segment_count(
        [None, 0],
        10 * HOUR_MS,
        file_reserved_time_hours=1,
        disk_full=False,
        delete_file_batch_max=9,
    )
    assert count == 0


def test_a_full_disk_deletes_regardless_of_age_up_to_the_batch_max() -> None:
    count = deletable_segment_count(
        [0] * 20, 0, file_reserved_time_hours=72, disk_full=True, delete_file_batch_max=10
    )
    assert count == 10


def test_disk_used_ratio_is_a_fraction(tmp_path: Path) -> None:
    assert 0.0 < disk_used_ratio(tmp_path) < 1.0


def test_expired_segments_are_deleted_by_the_clock_and_min_offset_moves(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    store = open_store(tmp_path, clock=clock, file_reserved_time_hours=1)
    old = put_many(store, 30, body_size=300)  # several segments, closed at the start time
    clock.advance(HOUR_MS // 2)
    recent = put_many(store, 30, body_size=300, start=30)
    segments_before = len(segment_paths(tmp_path))
    assert store.delete_expired() == []  # nothing was closed an hour ago yet
    clock.advance(HOUR_MS * 3 // 4)
    deleted = store.delete_expired()
    # Closed at the start: 75 min old, gone. Closed 30 min later: 45 min old, kept.
    assert deleted and all(int(p.name) < old[-1].physical_offset for p in deleted)
    assert len(segment_paths(tmp_path)) == segments_before - len(deleted)
    assert store.min_offset == int(segment_paths(tmp_path)[0].name)
    assert store.min_offset > old[0].physical_offset
    try:
        store.read(old[0].physical_offset)
    except OffsetOutOfRangeError as err:
        assert err.min_offset == store.min_offset
    else:
        raise AssertionError("a deleted record was readable")
    assert store.read(recent[-1].physical_offset).body
    store.close()


def test_retention_never_deletes_the_segment_being_written(tmp_path: Path) -> None:
    clock = ManualClock()
    store = open_store(tmp_path, clock=clock, file_reserved_time_hours=1)
    put_many(store, 40, body_size=300)
    clock.advance(1000 * HOUR_MS)
    for _ in range(5):
        store.delete_expired()
    assert len(segment_paths(tmp_path)) == 1
    assert store.put_batch([]) == []
    put_many(store, 1, start=40)
    store.close()


def test_a_full_disk_deletes_unexpired_segments(tmp_path: Path) -> None:
    store = open_store(tmp_path, disk_max_used_space_ratio=0.0001, delete_file_batch_max=2)
    put_many(store, 60, body_size=300)
    before = len(segment_paths(tmp_path))
    assert len(store.delete_expired()) == 2
    assert len(segment_paths(tmp_path)) == before - 2
    store.close()


def test_reopen_after_retention_keeps_queue_offsets(tmp_path: Path) -> None:
    clock = ManualClock()
    store = open_store(tmp_path, clock=clock, file_reserved_time_hours=1)
    put_many(store, 30, body_size=300)
    clock.advance(10 * HOUR_MS)
    put_many(store, 30, body_size=300, start=30)
    clock.advance(10 * HOUR_MS)
    assert store.delete_expired()
    store.close()
    store = open_store(tmp_path, clock=clock)
    assert store.queue_offset("TopicTest", 0) == 60
    store.close()
