"""A store written by our engine (``MessageStore``) loads in RocketMQ 5.3.3's real
DefaultMessageStore: load() succeeds, recovery ends at our max offset, every record we wrote
is found at its physical offset and decoded by RocketMQ with the CRC check on, and the
ConsumeQueues RocketMQ builds from our log agree with our queue offsets and tag hashes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from rmq_java import unb64

from rmq_spark.interop import Harness
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.delay_levels import (
    DEFAULT_MESSAGE_DELAY_LEVEL,
    parse_message_delay_level,
    schedule_tags_code,
)
from rmq_spark.store.hashing import tags_code
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC, segment_base_offset, segment_name
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.properties import delay_level_of, parse_properties, tags_of
from rmq_spark.store.put import PutRequest, PutResult

pytestmark = pytest.mark.slow

SEGMENT_SIZE_BYTES = 64 * 1024
MESSAGE_COUNT = 120
RETRY_TOPIC_V2 = "%RETRY%" + "g" * 140  # > 127 chars: a v2 record


def requests() -> list[PutRequest]:
    """Varied messages: tags, keys, user properties, empty/unicode/large bodies, IPv6 born
    hosts, a delayed message, a v2 %RETRY% topic and a committed transaction message."""
    out = []
    for i in range(MESSAGE_COUNT):
        kind = i % 8
        born = HostAddress("192.168.3." + str(i % 200 + 1), 40000 + i)
        if kind == 0:
            out.append(PutRequest("TopicA", f"message {i}".encode(), i % 4, tags="TagA"))
        elif kind == 1:
            out.append(
                PutRequest(
                    "TopicB",
                    f"héllo ✓ 🚀 {i}".encode(),
                    i % 3,
                    properties={"color": "red", "ключ": "значение"},
                    tags="TagB",
                    keys=(f"key-{i}", f"order-{i}"),
                    born_host=born,
                )
            )
        elif kind == 2:
            out.append(PutRequest("TopicA", b"", 0))
        elif kind == 3:
            out.append(
                PutRequest(
                    "TopicC",
                    bytes(j * 31 % 256 for j in range(3000)),
                    1,
                    tags="TagC",
                    born_host=HostAddress("2001:db8::" + format(i, "x"), 40000 + i),
                )
            )
        elif kind == 4:
            out.append(PutRequest(RETRY_TOPIC_V2, b"retry", 0, reconsume_times=2))
        elif kind == 5:
            out.append(
                PutRequest("TopicA", b"later", 2, properties={"DELAY": "3"}, tags="TagDelay")
            )
        elif kind == 6:
            out.append(PutRequest("TopicC", bytes(9000), 0, flag=7, tags="TagBig"))
        else:
            out.append(
                PutRequest(
                    "TopicTx", b"committed", 0, sys_flag=0x8, prepared_transaction_offset=4096
                )
            )
    return out


def write_our_store(root: Path, flush_policy: FlushPolicy, close: bool) -> dict[str, Any]:
    config = StoreConfig(
        root_dir=root, segment_size_bytes=SEGMENT_SIZE_BYTES, flush_policy=flush_policy
    )
    store = MessageStore.open(config)
    results: list[PutResult] = [store.put(r) for r in requests()]
    records: list[MessageRecord] = [store.read(r.physical_offset) for r in results]
    max_offset = store.max_offset
    if close:
        store.close()
    else:
        store.abandon()  # like a SIGKILL: no final flush or snapshot, ``abort`` stays
    return {"results": results, "records": records, "max_offset": max_offset}


def _rocketmq_reads(harness: Harness, root: Path, tmp_path: Path) -> dict[str, list[dict]]:
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    by_event: dict[str, list[dict]] = {}
    for line in harness.read_store(copy):
        by_event.setdefault(line["event"], []).append(line)
    return by_event


def _check_rocketmq_sees_our_store(ours: dict[str, Any], seen: dict[str, list[dict]]) -> None:
    results: list[PutResult] = ours["results"]
    records: list[MessageRecord] = ours["records"]
    assert all(r.ok for r in results), [r for r in results if not r.ok][:3]
    (load,) = seen["load"]
    assert load["ok"], load
    assert load["maxOffset"] == ours["max_offset"]
    assert "bad_record" not in seen, seen.get("bad_record")
    (walk_end,) = seen["walk_end"]
    assert walk_end["offset"] == ours["max_offset"], walk_end
    messages = seen["message"]
    assert [m["physicalOffset"] for m in messages] == [r.physical_offset for r in results]
    for message, result, record in zip(messages, results, records, strict=True):
        label = f"record at {result.physical_offset}"
        assert message["decodedByMessageDecoder"], label
        assert message["size"] == result.total_size, label
        assert message["topic"] == result.topic == record.topic, label
        assert message["queueId"] == result.queue_id, label
        assert message["queueOffset"] == result.queue_offset, label
        assert message["dispatchQueueOffset"] == result.queue_offset, label
        assert message["msgId"] == result.msg_id, label
        assert message["storeTimestamp"] == result.store_timestamp_ms, label
        assert unb64(message["body"]) == record.body, label
        assert message["propertiesString"] == record.properties, label
        assert message["sysFlag"] == record.sys_flag, label
        assert message["bodyCrc"] == record.body_crc, label
        assert HostAddress.parse(message["bornHost"]) == record.born_host, label
        assert HostAddress.parse(message["storeHost"]) == record.store_host, label
        assert message["flag"] == record.flag, label
        assert message["reconsumeTimes"] == record.reconsume_times, label
        assert message["preparedTransactionOffset"] == record.prepared_transaction_offset, label
        if result.uniq_key is not None:
            assert message["uniqKey"] == result.uniq_key, label

    # The ConsumeQueues RocketMQ built from our log: one unit per record, at our queue offset.
    levels = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)
    expected = set()
    for result, record in zip(results, records, strict=True):
        props = parse_properties(record.properties)
        code = tags_code(tags_of(props))
        if record.topic == RMQ_SYS_SCHEDULE_TOPIC:
            delivery = schedule_tags_code(record.store_timestamp_ms, delay_level_of(props), levels)
            code = code if delivery is None else delivery
        expected.add(
            (record.topic, record.queue_id, result.queue_offset, result.physical_offset,
             result.total_size, code)
        )  # fmt: skip
    found = {
        (u["topic"], u["queueId"], u["queueOffset"], u["physicalOffset"], u["size"], u["tagsCode"])
        for u in seen["cq_unit"]
    }
    assert found == expected
    (end,) = seen["end"]
    assert end["getMessageCount"] == end["cqUnits"] == len(results)
    assert end["maxOffset"] == ours["max_offset"]


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
    seen = _rocketmq_reads(harness, ours["root"], tmp_path)
    (load,) = seen["load"]
    assert load["lastExitOK"], "our close() must leave no abort marker"
    _check_rocketmq_sees_our_store(ours, seen)


def test_rocketmq_recovery_stops_at_a_body_byte_we_flipped(
    harness: Harness, our_sync_store: dict[str, Any], tmp_path: Path
) -> None:
    # Shows that the comparison above has teeth: RocketMQ really checks our BODYCRC.
    results: list[PutResult] = our_sync_store["results"]
    victim_index = next(i for i, r in enumerate(results) if i > 40 and r.total_size > 1000)
    victim = results[victim_index]
    copy = tmp_path / "flipped"
    shutil.copytree(our_sync_store["root"], copy)
    base = segment_base_offset(victim.physical_offset, SEGMENT_SIZE_BYTES)
    segment = copy / "commitlog" / segment_name(base)
    data = bytearray(segment.read_bytes())
    position = victim.physical_offset % SEGMENT_SIZE_BYTES + victim.total_size // 2
    data[position] ^= 0x01
    segment.write_bytes(bytes(data))
    lines = harness.read_store(copy)
    (load,) = [line for line in lines if line["event"] == "load"]
    assert load["ok"]
    assert load["maxOffset"] == victim.physical_offset  # RocketMQ truncated at the bad record
    messages = [line for line in lines if line["event"] == "message"]
    assert len(messages) == victim_index


def test_rocketmq_recovers_our_async_store_abandoned_like_a_crash(
    harness: Harness, tmp_path: Path
) -> None:
    ours = write_our_store(tmp_path / "store", FlushPolicy.ASYNC, close=False)
    seen = _rocketmq_reads(harness, tmp_path / "store", tmp_path)
    (load,) = seen["load"]
    assert not load["lastExitOK"], "abandon() must leave the abort marker"
    _check_rocketmq_sees_our_store(ours, seen)
