"""Checks shared by the interop tests: walking a CommitLog with our codec, writing a varied
store with our engine, and comparing our view of a store with RocketMQ's (5.x or 4.x harness
output). These helpers assert; the test modules decide what to run them on."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from rmq_java import unb64
from store_helpers import tags_of

from rmq_spark.interop import Harness
from rmq_spark.store.codec import BlankPadding, DecodedRecord, Unwritten, decode_record
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.cq_files import CQ_FILE_UNITS
from rmq_spark.store.delay_levels import (
    DEFAULT_MESSAGE_DELAY_LEVEL,
    parse_message_delay_level,
    schedule_tags_code,
)
from rmq_spark.store.hashing import tags_code
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC, is_segment_name, parse_segment_name
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.msg_id import offset_msg_id
from rmq_spark.store.properties import delay_level_of, parse_properties
from rmq_spark.store.put import PutRequest, PutResult
from rmq_spark.store.record_crc import RECORD_CRC_BYTES

__all__ = [
    "RETRY_TOPIC_V2",
    "SEGMENT_SIZE_BYTES",
    "check_rocketmq_sees_our_store",
    "check_we_read_what_rocketmq_put",
    "requests",
    "rocketmq_reads",
    "walk_commitlog",
    "write_our_store",
]

SEGMENT_SIZE_BYTES = 64 * 1024
VERIFY_PROP_CRC_ENV = "RMQ_INTEROP_FORCE_VERIFY_PROP_CRC"
"""Set for ``read-store``: RocketMQ loads with ``forceVerifyPropCRC`` (records lacking the
property then fail its check, so only stores whose records all carry it are read so)."""
MESSAGE_COUNT = 120
RETRY_TOPIC_V2 = "%RETRY%" + "g" * 140  # > 127 chars: a v2 record


def walk_commitlog(commitlog_dir: Path) -> tuple[list[DecodedRecord], int, list[str]]:
    """Every record of every segment, in order, the data end offset, and how files ended.

    A BLANK record sends us to the next file; zero bytes (``Unwritten``) end the data.
    """
    names = sorted(p.name for p in commitlog_dir.iterdir() if is_segment_name(p.name))
    records: list[DecodedRecord] = []
    endings: list[str] = []
    data_end = 0
    for name in names:
        base = parse_segment_name(name)
        buf = (commitlog_dir / name).read_bytes()
        position = 0
        while True:
            outcome = decode_record(buf, position, path=name)
            if isinstance(outcome, DecodedRecord):
                records.append(outcome)
                position = outcome.next_position
                data_end = base + position
                continue
            if isinstance(outcome, BlankPadding):
                assert position + outcome.remaining_bytes == len(buf), name
                endings.append("blank")
            elif isinstance(outcome, Unwritten):
                endings.append("unwritten")
            else:
                endings.append(type(outcome).__name__)
            break
        if endings[-1] != "blank":
            break
    return records, data_end, endings


def check_we_read_what_rocketmq_put(records: list[DecodedRecord], puts: list[dict]) -> None:
    """Our decoding of RocketMQ's log equals what its write-store reported for every put."""
    assert all(p["status"] == "PUT_OK" for p in puts)
    assert len(records) == len(puts)
    for outcome, put in zip(records, puts, strict=True):
        record = outcome.record
        label = f"put #{put['index']} at {put['physicalOffset']}"
        assert outcome.total_size == put["size"], label
        assert outcome.magic_version == put["magicVersion"], label
        assert record.physical_offset == put["physicalOffset"], label
        assert record.topic == put["topic"], label
        assert record.queue_id == put["queueId"], label
        assert record.queue_offset == put["queueOffset"] or (
            put["sysFlag"] & 0xC == 0x4 and record.queue_offset == 0
        ), label
        assert record.flag == put["flag"], label
        assert record.sys_flag == put["sysFlag"], label
        assert record.born_timestamp_ms == put["bornTimestamp"], label
        assert record.born_host == HostAddress.parse(put["bornHost"]), label
        assert record.store_timestamp_ms == put["storeTimestamp"], label
        assert record.store_host == HostAddress.parse(put["storeHost"]), label
        assert record.reconsume_times == put["reconsumeTimes"], label
        assert record.prepared_transaction_offset == put["preparedTransactionOffset"], label
        assert record.body == unb64(put["body"]), label
        assert record.body_crc == put["bodyCrc"], label
        assert record.properties == put["propertiesString"], label
        assert offset_msg_id(record.store_host, record.physical_offset) == put["msgId"], label
        assert tags_code(tags_of(parse_properties(record.properties))) == put["tagsCode"], label


def requests(include_v2: bool = True) -> list[PutRequest]:
    """Varied messages: tags, keys, user properties, empty/unicode/large bodies, IPv6 born
    hosts, a delayed message, a v2 %RETRY% topic (unless ``include_v2`` is false: RocketMQ 4.x
    knows v1 only), committed and PREPARED transaction records."""
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
            topic = RETRY_TOPIC_V2 if include_v2 else "%RETRY%group"
            out.append(PutRequest(topic, b"retry", 0, reconsume_times=2))
        elif kind == 5:
            out.append(
                PutRequest("TopicA", b"later", 2, properties={"DELAY": "3"}, tags="TagDelay")
            )
        elif kind == 6:
            out.append(PutRequest("TopicC", bytes(9000), 0, flag=7, tags="TagBig"))
        elif i % 16 == 7:
            out.append(
                PutRequest(
                    "TopicTx", b"committed", 0, sys_flag=0x8, prepared_transaction_offset=4096
                )
            )
        else:  # a PREPARED record: stored with QUEUEOFFSET 0 and no ConsumeQueue unit
            out.append(PutRequest("TopicTx", b"half", 0, sys_flag=0x4))
    return out


def write_our_store(
    root: Path,
    flush_policy: FlushPolicy,
    close: bool,
    include_v2: bool = True,
    cq_file_units: int = CQ_FILE_UNITS,
) -> dict[str, Any]:
    """Our MessageStore writes ``requests()``; returns results, records read back, max offset.
    ``cq_file_units``: the size of its ConsumeQueue files (a broker refuses files of another
    size than it is configured with; the 5.x harness takes the size from the files)."""
    config = StoreConfig(
        root_dir=root,
        segment_size_bytes=SEGMENT_SIZE_BYTES,
        flush_policy=flush_policy,
        consume_queue_file_units=cq_file_units,
    )
    store = MessageStore.open(config)
    results: list[PutResult] = [store.put(r) for r in requests(include_v2)]
    records: list[MessageRecord] = [store.read(r.physical_offset) for r in results]
    max_offset = store.max_offset
    if close:
        store.close()
    else:
        store.abandon()  # like a SIGKILL: no final flush or snapshot, ``abort`` stays
    return {"results": results, "records": records, "max_offset": max_offset}


def rocketmq_reads(harness: Harness, root: Path, tmp_path: Path) -> dict[str, list[dict]]:
    """RocketMQ's read-store over a copy of ``root``, its lines grouped by event."""
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    by_event: dict[str, list[dict]] = {}
    # RocketMQ 5.2+ verifies the record CRC property of every record (all of ours carry it).
    os.environ[VERIFY_PROP_CRC_ENV] = "1"
    try:
        lines = harness.read_store(copy)
    finally:
        del os.environ[VERIFY_PROP_CRC_ENV]
    for line in lines:
        by_event.setdefault(line["event"], []).append(line)
    return by_event


def check_rocketmq_sees_our_store(
    ours: dict[str, Any], seen: dict[str, list[dict]], *, schedule_delivery_tags: bool = True
) -> None:
    """Every record we wrote is where we said, decoded alike, and in RocketMQ's CQs.

    ``schedule_delivery_tags=False``: expect SCHEDULE_TOPIC_XXXX units to carry the TAGS hash
    instead of the delivery time (RocketMQ 4.9.8 after an abnormal shutdown, see the 4.x test).
    """
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
        # Our records carry the record CRC property (FORMAT.md 2.3); RocketMQ shows it as a
        # property, our decoder leaves it out. RocketMQ verified it (forceVerifyPropCRC).
        stored = message["propertiesString"]
        assert stored[-RECORD_CRC_BYTES:-11] == "__CRC32#\x01", label
        assert stored[:-RECORD_CRC_BYTES] == record.properties, label
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
    consumable = 0
    for result, record in zip(results, records, strict=True):
        if record.sys_flag & 0xC in (0x4, 0xC):
            assert record.queue_offset == 0  # as CommitLog.doAppend stores it
            continue  # PREPARED / ROLLBACK records get no ConsumeQueue unit
        consumable += 1
        props = parse_properties(record.properties)
        code = tags_code(tags_of(props))
        if record.topic == RMQ_SYS_SCHEDULE_TOPIC and schedule_delivery_tags:
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
    assert end["getMessageCount"] == end["cqUnits"] == consumable < len(results)
    assert end["maxOffset"] == ours["max_offset"]
