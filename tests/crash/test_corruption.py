"""Corruption is detected and reported with its location, never skipped."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_helpers import open_store, put_many, segment_paths

from rmq_spark.clock import ManualClock
from rmq_spark.errors import CorruptRecordError
from rmq_spark.store.codec import encode_record
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.put import PutRequest


def _flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def _crashed(root: Path, count: int = 10) -> list:
    store = open_store(root)
    results = put_many(store, count)
    store.abandon()
    return results


@pytest.mark.parametrize(
    ("where", "reason"),
    [(120, "BODYCRC mismatch"), (5, "magic"), (2, "runs past the end|TOTALSIZE|impossible")],
    ids=["body", "magic", "size"],
)
def test_flipped_byte_in_the_middle_raises_with_the_record_position(
    tmp_path: Path, where: int, reason: str
) -> None:
    results = _crashed(tmp_path)
    victim = results[4]
    segment = segment_paths(tmp_path)[0]
    _flip(segment, victim.physical_offset + where)
    with pytest.raises(CorruptRecordError, match=reason) as info:
        open_store(tmp_path)
    assert info.value.position == victim.physical_offset
    assert info.value.path == str(segment)
    assert str(victim.physical_offset) in str(info.value)


def test_bad_record_below_the_durable_offset_is_corruption_even_at_the_end(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 6)
    store.flush()
    store.abandon()
    last = results[-1]
    _flip(segment_paths(tmp_path)[0], last.physical_offset + last.total_size - 1)
    with pytest.raises(CorruptRecordError, match="below the durable offset") as info:
        open_store(tmp_path)
    assert info.value.position == last.physical_offset


def test_missing_data_below_the_durable_offset_is_corruption(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 6)
    store.close()
    segment = segment_paths(tmp_path)[0]
    data = bytearray(segment.read_bytes())
    start = results[-2].physical_offset
    data[start:] = bytes(len(data) - start)
    segment.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="below the durable offset"):
        open_store(tmp_path)


def test_zeroed_header_followed_by_valid_records_is_a_hole(tmp_path: Path) -> None:
    results = _crashed(tmp_path)
    segment = segment_paths(tmp_path)[0]
    data = bytearray(segment.read_bytes())
    data[results[3].physical_offset : results[3].physical_offset + 8] = bytes(8)
    segment.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="followed by a valid record") as info:
        open_store(tmp_path)
    assert info.value.position == results[3].physical_offset


def test_garbage_before_a_later_segment_with_data_is_corruption(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 30, body_size=200)
    store.abandon()
    first_segment = segment_paths(tmp_path)[0]
    in_first = [r for r in results if r.physical_offset < 4096]
    data = bytearray(first_segment.read_bytes())
    start = in_first[-1].physical_offset
    data[start:] = bytes(len(data) - start)  # the last record and the BLANK are gone
    first_segment.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="valid data in segment 00000000000000004096"):
        open_store(tmp_path)


def test_read_of_a_corrupt_record_names_its_position(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 5)
    segment = segment_paths(tmp_path)[0]
    victim = results[2]
    with segment.open("r+b") as handle:
        handle.seek(victim.physical_offset + 150)
        handle.write(b"\x00\x01")
    with pytest.raises(CorruptRecordError, match="BODYCRC") as info:
        store.read(victim.physical_offset)
    assert info.value.path == str(segment)
    assert info.value.position == victim.physical_offset
    assert store.read(results[3].physical_offset).body
    assert store.put(PutRequest("TopicTest", b"still writable")).ok
    store.close()


def test_stale_older_records_past_a_rocketmq_truncation_are_not_corruption(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    store = open_store(tmp_path, clock=clock)
    results = put_many(store, 10)
    store.abandon()
    # RocketMQ truncated at record 5 after a crash, then wrote a shorter, newer record there
    # and left the old bytes behind it (it does not zero them).
    fifth = results[5]
    newer = encode_record(
        MessageRecord(
            "TopicTest",
            b"short",
            queue_offset=5,
            physical_offset=fifth.physical_offset,
            born_timestamp_ms=clock.now_ms() + 1000,
            store_timestamp_ms=clock.now_ms() + 1000,
            store_host=HostAddress("127.0.0.1", 10911),
        )
    )
    assert len(newer) < fifth.total_size
    segment = segment_paths(tmp_path)[0]
    with segment.open("r+b") as handle:
        handle.seek(fifth.physical_offset)
        handle.write(newer)
    store = open_store(tmp_path, clock=clock)
    report = store.recovery_report
    assert report.end_offset == fifth.physical_offset + len(newer)
    assert report.truncated_bytes > 0
    assert store.read(fifth.physical_offset).body == b"short"
    assert store.queue_offset("TopicTest", 0) == 6
    store.close()
