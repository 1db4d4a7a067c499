"""A store written by our engine (``MessageStore``) loads in RocketMQ 5.3.3's real
DefaultMessageStore: load() succeeds, recovery ends at our max offset, every record we wrote
is found at its physical offset and decoded by RocketMQ with the CRC check on, and the
ConsumeQueues RocketMQ builds from our log agree with our queue offsets and tag hashes."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from store_checks import (
    SEGMENT_SIZE_BYTES,
    check_rocketmq_sees_our_store,
    rocketmq_reads,
    write_our_store,
)

from rmq_spark.errors import CorruptRecordError
from rmq_spark.interop import Harness
from rmq_spark.store.codec import record_size
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC, segment_base_offset, segment_name
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.properties import parse_properties
from rmq_spark.store.put import PutRequest, PutResult
from rmq_spark.store.record_crc import RECORD_CRC_BYTES

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def our_sync_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("our-sync-store") / "store"
    ours = write_our_store(root, FlushPolicy.SYNC, close=True)
    return {**ours, "root": root}


def test_rocketmq_loads_our_sync_store_after_a_clean_close(
    harness: Harness, our_sync_store: dict[str, Any], tmp_path: Path
) -> None:
    ours = our_sync_store
    assert len({r.topic for r in ours["records"]}) >= 5
    assert any(len(r.topic) > 127 for r in ours["records"])
    assert any(r.topic == RMQ_SYS_SCHEDULE_TOPIC for r in ours["records"])
    assert ours["max_offset"] > 2 * SEGMENT_SIZE_BYTES  # rolled at least twice
    seen = rocketmq_reads(harness, ours["root"], tmp_path)
    (load,) = seen["load"]
    assert load["lastExitOK"], "our close() must leave no abort marker"
    check_rocketmq_sees_our_store(ours, seen)


def _segment_of(root: Path, physical_offset: int) -> tuple[Path, int]:
    base = segment_base_offset(physical_offset, SEGMENT_SIZE_BYTES)
    return root / "commitlog" / segment_name(base), physical_offset - base


def test_a_flipped_body_byte_rocketmq_truncates_silently_and_we_refuse_to_open(
    harness: Harness, our_sync_store: dict[str, Any], tmp_path: Path
) -> None:
    # Shows that the comparisons above have teeth (RocketMQ really checks our BODYCRC), and
    # where the two stores differ by design: RocketMQ's recovery cuts the log at the bad
    # record and drops everything after it; ours refuses acknowledged data that is damaged.
    results: list[PutResult] = our_sync_store["results"]
    victim_index = next(i for i, r in enumerate(results) if i > 40 and r.total_size > 1000)
    victim = results[victim_index]
    copy = tmp_path / "flipped"
    shutil.copytree(our_sync_store["root"], copy)
    segment, position = _segment_of(copy, victim.physical_offset)
    data = bytearray(segment.read_bytes())
    data[position + victim.total_size // 2] ^= 0x01
    segment.write_bytes(bytes(data))
    ours_copy = tmp_path / "flipped-for-us"
    shutil.copytree(copy, ours_copy)
    # Without ConsumeQueues RocketMQ 5.3 recovers from the first file on (with ours, from
    # the file of their largest offset on, and would never read the flipped record).
    shutil.rmtree(copy / "consumequeue")

    lines = harness.read_store(copy)
    (load,) = [line for line in lines if line["event"] == "load"]
    assert load["ok"]
    assert load["maxOffset"] == victim.physical_offset  # RocketMQ truncated at the bad record
    messages = [line for line in lines if line["event"] == "message"]
    assert len(messages) == victim_index

    config = StoreConfig(root_dir=ours_copy, segment_size_bytes=SEGMENT_SIZE_BYTES)
    with pytest.raises(CorruptRecordError, match="BODYCRC") as raised:
        MessageStore.open(config)
    assert raised.value.position == position
    assert raised.value.path.endswith(segment.name)


def test_rocketmq_verifies_our_record_crc_and_so_catches_a_flipped_header_byte(
    harness: Harness, our_sync_store: dict[str, Any], tmp_path: Path
) -> None:
    # BODYCRC does not cover BORNTIMESTAMP; the record CRC property does, and RocketMQ 5.3.3
    # with forceVerifyPropCRC computes the same CRC over our bytes (else the clean store above
    # would fail too): it stops at the flipped record, and so do we.
    results: list[PutResult] = our_sync_store["results"]
    victim_index = len(results) // 2
    victim = results[victim_index]
    copy = tmp_path / "flipped"
    shutil.copytree(our_sync_store["root"], copy)
    segment, position = _segment_of(copy, victim.physical_offset)
    data = bytearray(segment.read_bytes())
    data[position + 47] ^= 0x01  # the low byte of BORNTIMESTAMP
    segment.write_bytes(bytes(data))
    ours_copy = tmp_path / "flipped-for-us"
    shutil.copytree(copy, ours_copy)
    shutil.rmtree(copy / "consumequeue")  # as above: RocketMQ recovers from the first file

    seen = rocketmq_reads(harness, copy, tmp_path)
    (load,) = seen["load"]
    assert load["maxOffset"] == victim.physical_offset  # RocketMQ truncated at the bad record
    assert len(seen.get("message", [])) == victim_index

    config = StoreConfig(root_dir=ours_copy, segment_size_bytes=SEGMENT_SIZE_BYTES)
    with pytest.raises(CorruptRecordError, match="record CRC mismatch") as raised:
        MessageStore.open(config)
    assert raised.value.position == position


def test_we_and_rocketmq_recover_a_torn_unflushed_tail_to_the_same_offset(
    harness: Harness, tmp_path: Path
) -> None:
    # A crash after the last record was written but before it was fsynced, tearing it: the
    # checkpoint's flushed/confirmed offsets (24, 32) still point at the record's start.
    ours = write_our_store(tmp_path / "store", FlushPolicy.ASYNC, close=False)
    results: list[PutResult] = ours["results"]
    last = results[-1]
    root = tmp_path / "store"
    checkpoint = bytearray((root / "checkpoint").read_bytes())
    checkpoint[24:40] = struct.pack(">qq", last.physical_offset, last.physical_offset)
    (root / "checkpoint").write_bytes(bytes(checkpoint))
    segment, position = _segment_of(root, last.physical_offset)
    data = bytearray(segment.read_bytes())
    half = last.total_size // 2
    data[position + half : position + last.total_size] = bytes(last.total_size - half)
    segment.write_bytes(bytes(data))
    ours_copy = tmp_path / "torn-for-us"
    shutil.copytree(root, ours_copy)

    seen = rocketmq_reads(harness, root, tmp_path)
    (load,) = seen["load"]
    assert not load["lastExitOK"]
    assert load["maxOffset"] == last.physical_offset
    assert [m["physicalOffset"] for m in seen["message"]] == [
        r.physical_offset for r in results[:-1]
    ]

    store = MessageStore.open(
        StoreConfig(root_dir=ours_copy, segment_size_bytes=SEGMENT_SIZE_BYTES)
    )
    try:
        assert store.max_offset == last.physical_offset
    finally:
        store.close()


def test_rocketmq_recovers_our_async_store_abandoned_like_a_crash(
    harness: Harness, tmp_path: Path
) -> None:
    ours = write_our_store(tmp_path / "store", FlushPolicy.ASYNC, close=False)
    seen = rocketmq_reads(harness, tmp_path / "store", tmp_path)
    (load,) = seen["load"]
    assert not load["lastExitOK"], "abandon() must leave the abort marker"
    check_rocketmq_sees_our_store(ours, seen)


def test_our_properties_strings_are_what_a_5x_broker_writes_for_the_same_properties(
    harness: Harness, our_sync_store: dict[str, Any]
) -> None:
    # A 5.x broker serialises a HashMap(128) with messageProperties2String; keys are sent in
    # the order of our string so that bucket ties resolve as our insertion order did.
    records: list[MessageRecord] = our_sync_store["records"]
    maps = [parse_properties(r.properties) for r in records]
    answers = harness.encode([{"op": "props", "properties": m} for m in maps])
    for record, answer in zip(records, answers, strict=True):
        assert record.properties == answer["string"], record.topic


def test_rocketmq_reads_our_segments_filled_to_the_last_eight_bytes_and_one_short(
    harness: Harness, tmp_path: Path
) -> None:
    # Boundary of the roll rule (record + 8 <= room): a record that leaves exactly 8 bytes,
    # then one that misses fitting by a single byte, each followed by a BLANK and a roll.
    config = StoreConfig(root_dir=tmp_path / "store", segment_size_bytes=SEGMENT_SIZE_BYTES)
    props = "KEYS\x01k\x02"
    fixed = record_size(len("TopicEdge"), 0, len(props) + RECORD_CRC_BYTES)  # FORMAT.md 2.3
    results: list[PutResult] = []
    with MessageStore.open(config) as store:

        def put(body_size: int) -> PutResult:
            result = store.put(PutRequest("TopicEdge", bytes(body_size), raw_properties=props))
            assert result.ok, result
            results.append(result)
            return result

        for room_left_after in (8, 7):
            while SEGMENT_SIZE_BYTES - store.max_offset % SEGMENT_SIZE_BYTES > 6000:
                put(3000)
            room = SEGMENT_SIZE_BYTES - store.max_offset % SEGMENT_SIZE_BYTES
            last = put(room - room_left_after - fixed)
            if room_left_after == 8:  # it fitted, leaving just the BLANK's 8 bytes
                assert last.physical_offset + last.total_size == (
                    segment_base_offset(last.physical_offset, SEGMENT_SIZE_BYTES)
                    + SEGMENT_SIZE_BYTES
                    - 8
                )
            else:  # one byte short: it went to the next segment
                assert last.physical_offset % SEGMENT_SIZE_BYTES == 0
            put(10)
        max_offset = store.max_offset
    seen = rocketmq_reads(harness, config.root_dir, tmp_path)
    (load,) = seen["load"]
    assert load["ok"] and load["maxOffset"] == max_offset
    assert "bad_record" not in seen
    assert [m["physicalOffset"] for m in seen["message"]] == [r.physical_offset for r in results]
