"""Our record codec against RocketMQ 5.3.3's own encoder and decoder (MessageExtEncoder plus
the doAppend patches, MessageDecoder), on fixed edge cases and a seeded random batch."""

from __future__ import annotations

import zlib
from dataclasses import replace
from typing import Any

import pytest
from rmq_java import (
    b64,
    random_record_specs,
    record_from_java,
    record_spec,
    spec_for_record,
    unb64,
)

from rmq_spark.errors import CorruptRecordError
from rmq_spark.interop import Harness
from rmq_spark.store.codec import DecodedRecord, decode_record, encode_record
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.properties import parse_properties
from rmq_spark.store.record_crc import RECORD_CRC_BYTES

pytestmark = pytest.mark.slow

LONG_TOPIC = "T" * 140
FIXED_SPECS: dict[str, dict[str, Any]] = {
    "empty_body_no_properties": record_spec(),
    "hello_with_tags_and_keys": record_spec(
        body=b64(b"Hello RocketMQ"),
        properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "7F0000010000" + "A" * 20},
        queueOffset=5,
        physicalOffset=1073743058,
    ),
    "unicode_body_and_properties": record_spec(
        topic="Topic_uni",
        body=b64("héllo wörld ✓ 🚀".encode()),
        properties={"ключ": "значение", "emoji": "🚀🚀", "TAGS": "标签"},
    ),
    "ipv6_born_host": record_spec(bornHost="[2001:db8::1]:40000", body=b64(b"x")),
    "ipv6_store_host": record_spec(storeHost="[fe80::1]:10911", body=b64(b"x")),
    "ipv6_both_hosts": record_spec(
        bornHost="[::1]:1", storeHost="[2001:db8:85a3::8a2e:370:7334]:65535", body=b64(b"xy")
    ),
    "v2_topic_140_chars": record_spec(topic=LONG_TOPIC, body=b64(b"long topic")),
    "v1_topic_127_chars": record_spec(topic="a" * 127),
    "v2_topic_128_chars": record_spec(topic="a" * 128),
    "v2_topic_255_chars_ipv6": record_spec(topic="b" * 255, bornHost="[::2]:7"),
    "properties_without_trailing_separator": record_spec(propertiesString="TAGS\x01A\x02KEYS\x01k"),
    "properties_value_with_name_separator": record_spec(propertiesString="k\x01v\x01w\x02"),
    "properties_odd_segments": record_spec(propertiesString="\x02\x02a\x01\x02\x01b\x02xy\x02"),
    "all_byte_values_body": record_spec(body=b64(bytes(range(256)) * 4)),
    "large_body_100k": record_spec(body=b64(bytes(i * 7 % 251 for i in range(100_000)))),
    "extreme_ints": record_spec(
        queueId=0x7FFFFFFF,
        flag=-1,
        sysFlag=0x3,
        bornTimestamp=-1,
        storeTimestamp=(1 << 63) - 1,
        reconsumeTimes=-5,
        preparedTransactionOffset=-(1 << 63),
        queueOffset=(1 << 63) - 1,
        physicalOffset=(1 << 63) - 1,
    ),
    "compressed_flag_zlib_body": record_spec(
        sysFlag=0x1 | 0x300, body=b64(zlib.compress(b"compress me " * 100))
    ),
    "transaction_commit": record_spec(sysFlag=0x8, preparedTransactionOffset=4096, queueOffset=3),
    "record_crc_property_5_2": record_spec(
        appendPropCrc=True, properties={"TAGS": "TagA"}, body=b64(b"crc"), physicalOffset=200
    ),
    "record_crc_property_empty_properties": record_spec(appendPropCrc=True, body=b64(b"c")),
    "topic_with_retry_prefix": record_spec(topic="%RETRY%group_1", reconsumeTimes=3),
}


def _check_round_trip(answer: dict[str, Any], label: str) -> DecodedRecord:
    """Java's bytes decode to Java's fields, and re-encode to the same bytes."""
    assert "hex" in answer, f"{label}: Java did not encode: {answer}"
    data = bytes.fromhex(answer["hex"])
    outcome = decode_record(data, 0, path=label)
    assert isinstance(outcome, DecodedRecord), f"{label}: {outcome}"
    assert outcome.total_size == len(data) == answer["length"]
    assert outcome.magic_version == answer["magicVersion"]
    expected = record_from_java(answer["decoded"])
    properties = dict(answer["decoded"]["properties"])
    sealed = properties.pop("__CRC32#", None) is not None
    if sealed:  # the record CRC property (FORMAT.md 2.3): our decoder leaves it out
        expected = replace(expected, properties=expected.properties[:-RECORD_CRC_BYTES])
    assert outcome.record == expected, label
    assert parse_properties(outcome.record.properties) == properties, label
    # Re-encoding with the record CRC reproduces RocketMQ's seal (and so its CRC).
    encoded = encode_record(outcome.record, record_crc=sealed)
    assert encoded == data, f"{label}: re-encoding changes the bytes"
    return outcome


@pytest.fixture(scope="module")
def fixed_answers(harness: Harness) -> dict[str, dict[str, Any]]:
    names = list(FIXED_SPECS)
    answers = harness.encode([FIXED_SPECS[name] for name in names])
    return dict(zip(names, answers, strict=True))


@pytest.mark.parametrize("name", list(FIXED_SPECS))
def test_java_records_decode_and_reencode_identically(
    fixed_answers: dict[str, dict[str, Any]], name: str
) -> None:
    answer = fixed_answers[name]
    outcome = _check_round_trip(answer, name)
    spec = FIXED_SPECS[name]
    # The fields Java stored are the ones we asked for (Java adds only the IPv6 bits).
    record = outcome.record
    assert record.topic == spec["topic"]
    assert record.body == unb64(spec["body"])
    assert record.queue_id == spec["queueId"]
    assert record.flag == spec["flag"]
    assert record.queue_offset == spec["queueOffset"]
    assert record.physical_offset == spec["physicalOffset"]
    assert record.born_host == HostAddress.parse(spec["bornHost"])
    assert record.store_host == HostAddress.parse(spec["storeHost"])
    assert record.sys_flag & ~0x30 == spec["sysFlag"]


def test_our_encoder_writes_the_bytes_java_writes_for_the_same_fields(
    fixed_answers: dict[str, dict[str, Any]],
) -> None:
    for name, answer in fixed_answers.items():
        spec = FIXED_SPECS[name]
        record = MessageRecord(
            topic=spec["topic"],
            body=unb64(spec["body"]),
            properties=answer["decoded"]["propertiesString"],
            queue_id=spec["queueId"],
            flag=spec["flag"],
            queue_offset=spec["queueOffset"],
            physical_offset=spec["physicalOffset"],
            sys_flag=spec["sysFlag"],
            born_timestamp_ms=spec["bornTimestamp"],
            born_host=HostAddress.parse(spec["bornHost"]),
            store_timestamp_ms=spec["storeTimestamp"],
            store_host=HostAddress.parse(spec["storeHost"]),
            reconsume_times=spec["reconsumeTimes"],
            prepared_transaction_offset=spec["preparedTransactionOffset"],
        )
        assert encode_record(record).hex() == answer["hex"], name


def test_seeded_random_records_round_trip_between_java_and_us(harness: Harness) -> None:
    specs = random_record_specs(400, seed=20250507)
    answers = harness.encode(specs)
    ours = []
    for spec, answer in zip(specs, answers, strict=True):
        outcome = _check_round_trip(answer, f"random #{spec['id']}")
        ours.append(outcome.record)
    # And the other way: Java's MessageDecoder reads what our encoder writes.
    back = harness.encode([{"op": "decode", "hex": encode_record(r).hex()} for r in ours])
    for record, answer in zip(ours, back, strict=True):
        assert answer.get("decoded") is not None, f"Java cannot decode our record {record}"
        assert record_from_java(answer["decoded"]) == record


def test_prepared_and_rollback_records_store_queue_offset_zero(harness: Harness) -> None:
    # doAppend stores QUEUEOFFSET 0 for PREPARED (0x4) and ROLLBACK (0xC) records, whatever
    # offset the message carried: a put path must do the same to write Java's bytes.
    answers = harness.encode([record_spec(sysFlag=f, queueOffset=9) for f in (0x4, 0xC)])
    for answer in answers:
        outcome = _check_round_trip(answer, "prepared/rollback")
        assert outcome.record.queue_offset == 0


def test_java_decodes_every_fixed_record_we_encode(
    harness: Harness, fixed_answers: dict[str, dict[str, Any]]
) -> None:
    records = [record_from_java(a["decoded"]) for a in fixed_answers.values()]
    answers = harness.encode([{"op": "decode", "hex": encode_record(r).hex()} for r in records])
    for record, answer in zip(records, answers, strict=True):
        assert record_from_java(answer["decoded"]) == record


def test_topic_of_127_chars_but_more_utf8_bytes_is_where_java_and_we_differ(
    harness: Harness,
) -> None:
    # 5.3.3 picks v2 only for topic.length() > 127 (UTF-16 units); a 100-char topic of 2-byte
    # characters is 200 UTF-8 bytes and Java writes it with a 1-byte length (200 -> -56): a
    # record neither side can read back. We write v2 for it instead, which Java reads.
    topic = "é" * 100
    (java_answer,) = harness.encode([record_spec(topic=topic, body=b64(b"b"))])
    java_bytes = bytes.fromhex(java_answer["hex"])
    assert java_answer["magicVersion"] == 1
    assert java_answer.get("decoded") is None  # RocketMQ cannot read its own record
    with pytest.raises(CorruptRecordError, match="TOPICLENGTH"):
        decode_record(java_bytes, 0)

    ours = encode_record(MessageRecord(topic, b"b"))
    (back,) = harness.encode([{"op": "decode", "hex": ours.hex()}])
    assert back["decoded"]["topic"] == topic
    assert decode_record(ours, 0).magic_version == 2  # type: ignore[union-attr]


def test_records_java_built_from_our_fields_equal_ours(harness: Harness) -> None:
    # spec_for_record -> Java -> bytes == encode_record, for records built on our side.
    records = [
        MessageRecord("A", b"", ""),
        MessageRecord("B" * 200, b"\x00" * 10, "a\x01b\x02", queue_id=3, queue_offset=1),
        MessageRecord(
            "C",
            "✓".encode(),
            "TAGS\x01x\x02",
            born_host=HostAddress("::1", 5),
            store_host=HostAddress("10.1.2.3", 10911),
            physical_offset=65536,
        ),
    ]
    answers = harness.encode([spec_for_record(r) for r in records])
    for record, answer in zip(records, answers, strict=True):
        assert encode_record(record).hex() == answer["hex"]


def test_ipv4_mapped_ipv6_hosts_are_written_as_ipv4_like_rocketmq(harness: Harness) -> None:
    # Java turns "::ffff:a.b.c.d" into an Inet4Address, so RocketMQ writes 4-byte hosts and no
    # IPv6 flags for it; a dual-stack socket reports IPv4 peers in this form. HostAddress
    # unmaps such addresses, so our bytes are RocketMQ's bytes.
    mapped_born, mapped_store = "[::ffff:127.0.0.1]:5", "[::ffff:10.0.0.1]:10911"
    (java,) = harness.encode(
        [record_spec(bornHost=mapped_born, storeHost=mapped_store, physicalOffset=4096)]
    )
    assert java["sysFlag"] == 0  # Java: plain IPv4
    java_record = decode_record(bytes.fromhex(java["hex"]), 0)
    assert isinstance(java_record, DecodedRecord)
    assert java_record.record.store_host == HostAddress("10.0.0.1", 10911)

    ours = MessageRecord(
        "TopicTest",
        born_timestamp_ms=1_700_000_000_000,
        born_host=HostAddress.parse(mapped_born),
        store_timestamp_ms=1_700_000_000_123,
        store_host=HostAddress.parse(mapped_store),
        physical_offset=4096,
    )
    ours_bytes = encode_record(ours)
    assert ours_bytes == bytes.fromhex(java["hex"])
    (back,) = harness.encode([{"op": "decode", "hex": ours_bytes.hex()}])
    assert back["decoded"]["storeHost"] == "10.0.0.1:10911"
    assert back["decoded"]["msgId"] == "0A00000100002A9F" + "0000000000001000"
