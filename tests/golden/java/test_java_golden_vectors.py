"""Golden records written by Apache RocketMQ 5.3.3 itself (see README.md): our decoder reads
each to the fields RocketMQ's MessageDecoder reads, and our encoder writes the same bytes back.
Needs no Java: the bytes and RocketMQ's reading of them are committed."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rmq_spark.errors import CorruptRecordError
from rmq_spark.interop import GOLDEN_CASES_FILE, GOLDEN_EXPECTED_FILE, read_hex
from rmq_spark.store.codec import DecodedRecord, NeedMoreData, decode_record, encode_record
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.msg_id import offset_msg_id
from rmq_spark.store.properties import parse_properties
from rmq_spark.store.record_crc import RECORD_CRC_BYTES

JAVA_GOLDEN_DIR = Path(__file__).resolve().parent
CASES: dict[str, dict[str, Any]] = json.loads((JAVA_GOLDEN_DIR / GOLDEN_CASES_FILE).read_text())
EXPECTED: dict[str, dict[str, Any]] = json.loads(
    (JAVA_GOLDEN_DIR / GOLDEN_EXPECTED_FILE).read_text()
)
NAMES = sorted(CASES)


def java_fields(decoded: dict[str, Any]) -> MessageRecord:
    return MessageRecord(
        topic=decoded["topic"],
        body=base64.b64decode(decoded["body"]),
        properties=decoded["propertiesString"],
        queue_id=decoded["queueId"],
        flag=decoded["flag"],
        queue_offset=decoded["queueOffset"],
        physical_offset=decoded["physicalOffset"],
        sys_flag=decoded["sysFlag"],
        born_timestamp_ms=decoded["bornTimestamp"],
        born_host=HostAddress.parse(decoded["bornHost"]),
        store_timestamp_ms=decoded["storeTimestamp"],
        store_host=HostAddress.parse(decoded["storeHost"]),
        reconsume_times=decoded["reconsumeTimes"],
        prepared_transaction_offset=decoded["preparedTransactionOffset"],
        body_crc=decoded["bodyCrc"],
    )


def test_every_case_has_its_golden_file_and_expectation() -> None:
    hex_names = sorted(p.stem for p in JAVA_GOLDEN_DIR.glob("*.hex"))
    assert hex_names == NAMES == sorted(EXPECTED)


@pytest.mark.parametrize("name", NAMES)
def test_rocketmq_golden_record_decodes_to_what_rocketmq_reads(name: str) -> None:
    data = read_hex(JAVA_GOLDEN_DIR / f"{name}.hex")
    expected = EXPECTED[name]
    outcome = decode_record(data, 0, path=f"{name}.hex")
    assert isinstance(outcome, DecodedRecord)
    assert outcome.total_size == len(data) == expected["storeSize"]
    # The record CRC property is integrity data: our decoder leaves it out of the properties.
    java = java_fields(expected)
    if "__CRC32#" in expected["properties"]:
        java = replace(java, properties=java.properties[:-RECORD_CRC_BYTES])
    assert outcome.record == java
    properties = {k: v for k, v in expected["properties"].items() if k != "__CRC32#"}
    assert parse_properties(outcome.record.properties) == properties
    record = outcome.record
    assert offset_msg_id(record.store_host, record.physical_offset) == expected["msgId"]


@pytest.mark.parametrize("name", NAMES)
def test_our_encoder_writes_the_rocketmq_golden_bytes(name: str) -> None:
    data = read_hex(JAVA_GOLDEN_DIR / f"{name}.hex")
    assert encode_record(java_fields(EXPECTED[name])) == data


@pytest.mark.parametrize("name", NAMES)
def test_every_prefix_of_a_rocketmq_golden_record_needs_more_data(name: str) -> None:
    data = read_hex(JAVA_GOLDEN_DIR / f"{name}.hex")
    for cut in range(len(data)):
        assert isinstance(decode_record(data[:cut], 0), NeedMoreData), cut


def test_golden_cases_pin_the_put_path_rules() -> None:
    # Facts the cases were chosen for; a regenerated set must keep them.
    magic = {name: read_hex(JAVA_GOLDEN_DIR / f"{name}.hex")[4:8].hex() for name in NAMES}
    assert magic["v1_topic_127_chars"] == "daa320a7"
    assert magic["v2_topic_128_chars"] == "daa320ab"
    assert EXPECTED["transaction_prepared_queue_offset_zeroed"]["queueOffset"] == 0
    assert CASES["transaction_prepared_queue_offset_zeroed"]["queueOffset"] == 9
    assert EXPECTED["ipv6_both_hosts"]["sysFlag"] == 0x30
    assert EXPECTED["record_crc_property"]["propertiesString"].endswith("\x02")
    assert "__CRC32#" in EXPECTED["record_crc_property"]["properties"]


def test_rocketmq_record_crc_is_verified_and_written_the_same_by_us() -> None:
    # RocketMQ 5.3.3 with enabledAppendPropCRC wrote this record: our check accepts its CRC,
    # our encoder seals the same digits, and a flipped bit anywhere it covers is caught.
    data = read_hex(JAVA_GOLDEN_DIR / "record_crc_property.hex")
    outcome = decode_record(data, 0, check_crc=True)
    assert isinstance(outcome, DecodedRecord)
    assert encode_record(outcome.record, record_crc=True) == data
    damaged = bytearray(data)
    damaged[40] ^= 0x01  # BORNTIMESTAMP: not covered by BODYCRC
    with pytest.raises(CorruptRecordError, match="record CRC mismatch"):
        decode_record(damaged, 0, check_crc=True)
