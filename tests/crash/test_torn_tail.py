"""A torn tail is not corruption: truncate the last record at every byte, recover N-1."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from store_helpers import open_store, put_many, segment_paths, zero_from

from rmq_spark.errors import OffsetOutOfRangeError
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest


def _open(root: Path, **overrides: object) -> MessageStore:
    """A store with a small IndexFile: each cut copies the whole store (the default is 400 MB)."""
    return open_store(root, index_hash_slots=64, index_entries=256, **overrides)


def _crashed_store(root: Path, count: int, body_size: int) -> list:
    """``count`` records written in ASYNC mode, never flushed, then the process "dies"."""
    store = _open(root)
    results = put_many(store, count, body_size=body_size)
    store.abandon()
    return results


@pytest.mark.parametrize(
    ("count", "body_size"), [(12, 40), (30, 60)], ids=["mid-segment", "rolled"]
)
def test_recovery_truncates_torn_tail_at_every_byte_of_the_last_record(
    tmp_path: Path, count: int, body_size: int
) -> None:
    pristine = tmp_path / "pristine"
    results = _crashed_store(pristine, count, body_size)
    last = results[-1]
    segment = segment_paths(pristine)[-1]
    base = int(segment.name)
    position = last.physical_offset - base
    original = segment.read_bytes()[position : position + last.total_size]
    for cut in range(last.total_size):
        root = tmp_path / f"cut{cut}"
        shutil.copytree(pristine, root)
        zero_from(root / "commitlog" / segment.name, position + cut)
        store = _open(root)
        try:
            report = store.recovery_report
            expected_torn = len(original[:cut].rstrip(b"\0"))
            assert not report.clean_shutdown
            assert report.end_offset == last.physical_offset == store.max_offset
            assert report.truncated_bytes == expected_torn, cut
            assert report.truncated_at == (last.physical_offset if expected_torn else None)
            for result in results[:-1]:
                assert (
                    store.read(result.physical_offset).body
                    == (f"message-{results.index(result)}-".encode() * body_size)[:body_size]
                )
            with pytest.raises(OffsetOutOfRangeError):
                store.read(last.physical_offset)
            # The log continues where the torn record was, with its queue offset.
            again = store.put(PutRequest("TopicTest", b"after", queue_id=0))
            assert (again.physical_offset, again.queue_offset) == (
                last.physical_offset,
                last.queue_offset,
            )
        finally:
            store.abandon()  # quicker than close(); the copy is thrown away
        shutil.rmtree(root)


def test_torn_tail_bytes_are_zeroed_so_a_shorter_record_leaves_no_garbage(tmp_path: Path) -> None:
    results = _crashed_store(tmp_path, 5, 300)
    last = results[-1]
    segment = segment_paths(tmp_path)[-1]
    zero_from(segment, last.physical_offset - int(segment.name) + 200)
    store = _open(tmp_path)
    assert store.recovery_report.truncated_bytes == 200
    store.put(PutRequest("TopicTest", b"short"))
    store.abandon()
    store = _open(tmp_path)
    assert store.recovery_report.truncated_bytes == 0
    assert store.recovery_report.reason == ""
    store.close()


def test_a_crash_between_creating_a_segment_and_writing_the_blank_recovers(
    tmp_path: Path,
) -> None:
    results = _crashed_store(tmp_path, 3, 100)
    # A preallocated next segment with nothing in it, and no BLANK in the current one.
    (tmp_path / "commitlog" / "00000000000000004096").write_bytes(bytes(4096))
    store = _open(tmp_path)
    report = store.recovery_report
    assert report.end_offset == results[-1].physical_offset + results[-1].total_size
    assert report.deleted_segments == ("00000000000000004096",)
    assert report.truncated_bytes == 0
    assert [p.name for p in segment_paths(tmp_path)] == ["00000000000000000000"]
    store.close()


def test_recovery_after_a_crash_scans_only_the_tail_after_the_snapshot(tmp_path: Path) -> None:
    store = _open(tmp_path, idempotency_window_messages=0)
    put_many(store, 40)
    store.snapshot()
    snapshot_end = store.max_offset
    put_many(store, 5, start=40)
    store.abandon()
    store = _open(tmp_path, idempotency_window_messages=0)
    report = store.recovery_report
    assert report.used_snapshot and report.start_offset == snapshot_end
    assert report.record_count == 5
    assert store.queue_offset("TopicTest", 0) == 45
    store.close()
