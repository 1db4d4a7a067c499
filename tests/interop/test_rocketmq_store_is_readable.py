"""A store written by RocketMQ 5.3.3's real DefaultMessageStore (SYNC_FLUSH, 64 KiB CommitLog
files so that they roll) is readable by our code: its CommitLog segments with our codec, its
ConsumeQueue files with our CQ unit codec, and RocketMQ's own reader agrees with itself."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from rmq_java import JAVA_STORE_MESSAGE_COUNT, JAVA_STORE_SEGMENT_SIZE_BYTES
from store_checks import check_we_read_what_rocketmq_put, walk_commitlog
from store_helpers import tags_of

from rmq_spark.interop import Harness
from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.consume_queue import decode_cq_unit
from rmq_spark.store.delay_levels import (
    DEFAULT_MESSAGE_DELAY_LEVEL,
    parse_message_delay_level,
    schedule_tags_code,
)
from rmq_spark.store.hashing import tags_code
from rmq_spark.store.layout import (
    CQ_UNIT_SIZE_BYTES,
    RMQ_SYS_SCHEDULE_TOPIC,
)
from rmq_spark.store.properties import delay_level_of, parse_properties

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def walked(java_store: dict[str, Any]) -> tuple[list[DecodedRecord], int, list[str]]:
    return walk_commitlog(java_store["root"] / "commitlog")


def test_every_message_rocketmq_stored_decodes_at_its_offset(
    java_store: dict[str, Any], walked: tuple[list[DecodedRecord], int, list[str]]
) -> None:
    assert len(java_store["puts"]) == JAVA_STORE_MESSAGE_COUNT
    check_we_read_what_rocketmq_put(walked[0], java_store["puts"])


def test_the_store_covers_v2_ipv6_delay_and_transaction_records(
    walked: tuple[list[DecodedRecord], int, list[str]],
) -> None:
    # Guards the fixture: the walk above must have met every kind of record it is meant to.
    records, _, _ = walked
    assert any(r.magic_version == 2 for r in records)
    assert any(r.record.born_host.is_ipv6 for r in records)
    assert any(r.record.store_host.is_ipv6 for r in records)
    assert any(r.record.topic == RMQ_SYS_SCHEDULE_TOPIC for r in records)
    assert any(r.record.sys_flag & 0xC == 0x4 for r in records)
    assert any(r.record.prepared_transaction_offset > 0 for r in records)
    assert any(r.record.body == b"" for r in records)


def test_full_segments_end_in_a_blank_record_and_data_ends_at_max_offset(
    java_store: dict[str, Any], walked: tuple[list[DecodedRecord], int, list[str]]
) -> None:
    _, data_end, endings = walked
    shutdown = java_store["shutdown"]
    assert data_end == shutdown["maxOffset"]
    files = shutdown["commitlogFiles"]
    assert len(files) >= 3, files  # the store rolled at least twice
    assert all(f.endswith(f":{JAVA_STORE_SEGMENT_SIZE_BYTES}") for f in files)
    assert endings[:-1] == ["blank"] * (len(endings) - 1)
    assert endings[-1] == "unwritten"


def test_rocketmq_consume_queues_decode_with_our_cq_codec(
    java_store: dict[str, Any], walked: tuple[list[DecodedRecord], int, list[str]]
) -> None:
    records, _, _ = walked
    levels = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)
    expected: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for outcome in records:
        record = outcome.record
        if record.sys_flag & 0xC in (0x4, 0xC):
            continue  # PREPARED / ROLLBACK records get no ConsumeQueue unit
        props = parse_properties(record.properties)
        code = tags_code(tags_of(props))
        if record.topic == RMQ_SYS_SCHEDULE_TOPIC:
            delivery = schedule_tags_code(record.store_timestamp_ms, delay_level_of(props), levels)
            code = code if delivery is None else delivery
        units = expected.setdefault((record.topic, record.queue_id), [])
        assert record.queue_offset == len(units)
        units.append((record.physical_offset, outcome.total_size, code))

    cq_root = java_store["root"] / "consumequeue"
    found: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for queue_dir in sorted(p for p in cq_root.glob("*/*") if p.is_dir()):
        units = []
        for cq_file in sorted(queue_dir.iterdir()):
            data = cq_file.read_bytes()
            for position in range(0, len(data), CQ_UNIT_SIZE_BYTES):
                unit = decode_cq_unit(data, position)
                if unit.is_valid:
                    units.append((unit.physical_offset, unit.size, unit.tags_code))
        found[(queue_dir.parent.name, int(queue_dir.name))] = units
    assert found == expected


@pytest.fixture(scope="module")
def read_back(
    harness: Harness, java_store: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """RocketMQ's read-store over a copy of the RocketMQ-written store."""
    root = tmp_path_factory.mktemp("java-store-copy") / "store"
    shutil.copytree(java_store["root"], root)
    return {"root": root, "lines": harness.read_store(root)}


def test_rocketmq_5_3_3_leaves_confirm_phy_offset_stale_in_the_checkpoint(
    java_store: dict[str, Any], read_back: dict[str, Any]
) -> None:
    # Outside controller mode 5.3.3 sets confirmPhyOffset only during recovery, to the START
    # offset of the last valid message, and never while running. A reader that trusts it as
    # "durable end" would see nothing of a fresh RocketMQ store.
    shutdown = java_store["shutdown"]
    assert shutdown["checkpoint"]["size"] == 4096
    assert shutdown["checkpoint"]["confirmPhyOffset"] == 0
    assert shutdown["maxOffset"] > 0

    (load,) = [line for line in read_back["lines"] if line["event"] == "load"]
    assert load["ok"] and load["maxOffset"] == shutdown["maxOffset"]
    last_put = java_store["puts"][-1]
    assert load["checkpointConfirmPhyOffset"] == last_put["physicalOffset"] < shutdown["maxOffset"]


def test_rocketmq_reads_back_its_own_store_through_the_harness(
    java_store: dict[str, Any], read_back: dict[str, Any]
) -> None:
    # Guards read-store itself (used on our stores in test_our_store_loads_in_rocketmq).
    lines = read_back["lines"]
    messages = [line for line in lines if line["event"] == "message"]
    puts = java_store["puts"]
    assert [m["physicalOffset"] for m in messages] == [p["physicalOffset"] for p in puts]
    assert all(m["decodedByMessageDecoder"] for m in messages)
    (end,) = [line for line in lines if line["event"] == "end"]
    consumable = [p for p in puts if p["sysFlag"] & 0xC not in (0x4, 0xC)]
    assert end["cqUnits"] == end["getMessageCount"] == len(consumable)
