from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from store_helpers import open_store, put_many, segment_paths

from rmq_spark.clock import ManualClock
from rmq_spark.errors import OffsetOutOfRangeError, StoreIOError, StoreMetadataError
from rmq_spark.store.put_lock import PutLock
from rmq_spark.store.reader_progress import ReaderProgress, publish_reader_progress
from rmq_spark.store.retention import (
    RETENTION_FILE,
    Retention,
    SegmentAge,
    disk_used_ratio,
    plan_deletions,
)

HOUR_MS = 3_600_000
SEGMENT = 4096  # store_helpers.small_config


def _plan(
    ages: list[SegmentAge],
    now_ms: int,
    *,
    readers: tuple[ReaderProgress, ...] = (),
    hours: int = 1,
    ratio: float = 0.5,
    batch_max: int = 10,
) -> list[str]:
    plan = plan_deletions(
        ages,
        readers,
        now_ms,
        file_reserved_time_hours=hours,
        disk_ratio=ratio,
        disk_max_used_space_ratio=0.75,
        disk_emergency_used_space_ratio=0.95,
        delete_file_batch_max=batch_max,
    )
    return [deletion.reason for deletion in plan]


def _ages(*closed_at: int | None) -> list[SegmentAge]:
    return [SegmentAge(i * 100, (i + 1) * 100, at) for i, at in enumerate(closed_at)]


def test_only_expired_segments_go_oldest_first() -> None:
    # The second is not expired, so the third waits too.
    assert _plan(_ages(0, 5 * HOUR_MS, 1 * HOUR_MS), 6 * HOUR_MS, hours=2) == ["expired"]


def test_unknown_close_time_is_kept() -> None:
    assert _plan(_ages(None, 0), 10 * HOUR_MS) == []


def test_a_full_disk_deletes_regardless_of_age_up_to_the_batch_max() -> None:
    assert _plan(_ages(*[0] * 20), 0, hours=72, ratio=0.8) == ["disk_full"] * 10


def test_a_reader_holds_back_expiry_and_a_full_disk_but_not_an_emergency() -> None:
    ages = _ages(0, 0, 0, 0)
    reader = (ReaderProgress("reput:t", 250, 0), ReaderProgress("group:fast", 400, 0))
    assert _plan(ages, 10 * HOUR_MS, readers=reader) == ["expired", "expired"]
    assert _plan(ages, 0, readers=reader, ratio=0.9) == ["disk_full", "disk_full"]
    plan = plan_deletions(
        ages,
        reader,
        0,
        file_reserved_time_hours=72,
        disk_ratio=0.96,
        disk_max_used_space_ratio=0.75,
        disk_emergency_used_space_ratio=0.95,
        delete_file_batch_max=10,
    )
    assert [d.reason for d in plan] == ["disk_full", "disk_full", "emergency", "emergency"]
    assert [d.unprocessed_bytes for d in plan] == [0, 0, 50, 100]
    assert plan[2].lost_by == (("reput:t", 50),)
    assert plan[2].segment == "00000000000000000200"


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


# --- readers: retention never deletes what a reader has not processed, short of an emergency ---


def _record(root: Path) -> dict[str, object]:
    body = json.loads((root / RETENTION_FILE).read_text())
    assert isinstance(body, dict)
    return body


def test_a_full_disk_keeps_the_segments_a_reput_job_has_not_processed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Over the normal ratio (every real disk is above 0.01%), never over the emergency one.
    store = open_store(
        tmp_path, disk_max_used_space_ratio=0.0001, disk_emergency_used_space_ratio=1.0
    )
    results = put_many(store, 60, body_size=300)
    assert len(segment_paths(tmp_path)) >= 5
    reput_at = 2 * SEGMENT + 100  # two segments processed, a bit of the third
    publish_reader_progress(tmp_path, "reput:/data/tables", reput_at, 0)
    with caplog.at_level(logging.WARNING, logger="rmq_spark.store.retention"):
        deleted = store.delete_expired()
        assert store.delete_expired() == []  # the next round waits too
    assert [int(p.name) for p in deleted] == [0, SEGMENT]
    assert store.min_offset == 2 * SEGMENT
    assert store.read(results[-1].physical_offset).body
    assert any(
        "reput:/data/tables" in r.message and r.levelno == logging.WARNING for r in caplog.records
    )
    record = _record(tmp_path)
    assert record["deleted_below"] == 2 * SEGMENT
    assert [d["reason"] for d in record["deletions"]] == ["disk_full", "disk_full"]  # type: ignore[union-attr]
    store.close()


def test_over_the_emergency_ratio_unprocessed_segments_go_logged_and_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(1_700_000_000_000)
    store = open_store(
        tmp_path,
        clock=clock,
        disk_max_used_space_ratio=0.0001,
        disk_emergency_used_space_ratio=0.0002,
        delete_file_batch_max=3,
    )
    put_many(store, 60, body_size=300)
    publish_reader_progress(tmp_path, "reput:/data/tables", SEGMENT + 96, 0)
    with caplog.at_level(logging.INFO, logger="rmq_spark.store.retention"):
        deleted = store.delete_expired()
    assert [int(p.name) for p in deleted] == [0, SEGMENT, 2 * SEGMENT]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2  # the first segment was processed
    assert f"'reput:/data/tables': {SEGMENT - 96} bytes" in errors[0]
    assert f"{SEGMENT:020d} [{SEGMENT}, {2 * SEGMENT})" in errors[0]
    assert not any(r.levelno == logging.WARNING and "is kept" in r.message for r in caplog.records)
    record = _record(tmp_path)
    assert record["version"] == 1
    assert record["deleted_below"] == 3 * SEGMENT
    assert record["deletions"] == [
        {
            "segment": f"{base:020d}",
            "base_offset": base,
            "end_offset": base + SEGMENT,
            "deleted_at_ms": 1_700_000_000_000,
            "reason": reason,
            "unprocessed_bytes": lost,
        }
        for base, reason, lost in (
            (0, "disk_full", 0),
            (SEGMENT, "emergency", SEGMENT - 96),
            (2 * SEGMENT, "emergency", SEGMENT),
        )
    ]
    store.delete_expired()  # the record grows, deleted_below moves on
    record = _record(tmp_path)
    assert record["deleted_below"] == store.min_offset
    assert len(record["deletions"]) == 6  # type: ignore[arg-type]
    store.close()


def test_expiry_by_time_waits_for_the_slowest_reader(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    store = open_store(tmp_path, clock=clock, file_reserved_time_hours=1)
    put_many(store, 60, body_size=300)
    segments = len(segment_paths(tmp_path))
    publish_reader_progress(tmp_path, "reput:/a", 3 * SEGMENT, 0)
    publish_reader_progress(tmp_path, "group:slow", SEGMENT, 0)
    clock.advance(10 * HOUR_MS)
    assert [int(p.name) for p in store.delete_expired()] == [0]
    publish_reader_progress(tmp_path, "group:slow", 10 * SEGMENT, 0)
    assert [int(p.name) for p in store.delete_expired()] == [SEGMENT, 2 * SEGMENT]
    assert len(segment_paths(tmp_path)) == segments - 3
    store.close()


def test_the_record_is_written_before_any_segment_goes(tmp_path: Path) -> None:
    store = open_store(tmp_path, disk_max_used_space_ratio=0.0001)
    put_many(store, 60, body_size=300)
    before = segment_paths(tmp_path)
    (tmp_path / (RETENTION_FILE + ".tmp")).mkdir(parents=True)  # the write's temp file
    with pytest.raises(StoreIOError, match="retention.json: cannot record"):
        store.delete_expired()
    assert segment_paths(tmp_path) == before
    store.close()


def test_a_damaged_record_or_reader_file_stops_retention_naming_the_file(tmp_path: Path) -> None:
    store = open_store(tmp_path, disk_max_used_space_ratio=0.0001)
    put_many(store, 60, body_size=300)
    before = segment_paths(tmp_path)
    record = tmp_path / RETENTION_FILE
    record.parent.mkdir(parents=True)
    record.write_text("{not json")
    with pytest.raises(StoreMetadataError, match="retention.json"):
        store.delete_expired()
    record.unlink()
    path = publish_reader_progress(tmp_path, "reput:/t", 0, 0)
    path.write_text('{"version": 1, "name": "reput:/t"}')
    with pytest.raises(StoreMetadataError, match=path.name):
        store.delete_expired()
    assert segment_paths(tmp_path) == before
    store.close()


def test_an_injected_disk_ratio_drives_the_emergency(tmp_path: Path) -> None:
    store = open_store(tmp_path, delete_file_batch_max=1)
    put_many(store, 60, body_size=300)
    publish_reader_progress(tmp_path, "reput:/t", 0, 0)
    ratio = [0.9]
    retention = Retention(
        store.config,
        ManualClock(),
        lambda: store.commitlog,
        PutLock(),
        disk_ratio=lambda _: ratio[0],
    )
    assert retention.delete_expired() == []
    ratio[0] = 0.97
    assert [int(p.name) for p in retention.delete_expired()] == [0]
    assert _record(tmp_path)["deletions"][0]["reason"] == "emergency"  # type: ignore[index]
    store.close()
