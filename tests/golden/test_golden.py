"""Golden byte vectors pin the CommitLog record format: encode == file, decode(file) == message.

The messages live in ``make_golden.py`` (``CASES``, ``BLANK_CASES``); the committed ``*.hex``
files are the reference. Decoders are fed like h11's tests: the whole buffer, every proper
prefix (``NeedMoreData`` until the last byte), then with trailing bytes.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib

import pytest
from make_golden import BLANK_CASES, CASES, CRC_CASES, GOLDEN_DIR, read_hex
from store_helpers import stored_form

from rmq_spark.store.codec import (
    BlankPadding,
    DecodedRecord,
    NeedMoreData,
    decode_record,
    encode_record,
)
from rmq_spark.store.record_crc import RECORD_CRC_BYTES

RECORD_NAMES = sorted(CASES)


def golden(name: str) -> bytes:
    return read_hex(GOLDEN_DIR / f"{name}.hex")


def test_every_case_has_a_committed_golden_file_and_no_file_is_orphaned():
    names = {path.stem for path in GOLDEN_DIR.glob("*.hex")}
    assert names == set(CASES) | set(CRC_CASES) | set(BLANK_CASES)


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_encode_matches_golden_bytes(name):
    assert encode_record(CASES[name]) == golden(name)


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_decode_of_golden_bytes_is_the_message(name):
    data = golden(name)
    outcome = decode_record(data, path=f"{name}.hex")
    assert outcome == DecodedRecord(CASES[name], 0, len(data), outcome.magic_version)
    assert CASES[name] == stored_form(CASES[name])  # cases are written in stored form


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_golden_record_decodes_fed_byte_by_byte(name):
    data = golden(name)
    for cut in range(len(data)):
        assert decode_record(data[:cut]) == NeedMoreData(cut, 8 if cut < 8 else len(data))
    assert decode_record(data).record == CASES[name]


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_golden_record_decodes_with_trailing_bytes_left_over(name):
    data = golden(name)
    for trailer in (b"\x00", b"\xff" * 7, golden("blank"), data):
        outcome = decode_record(memoryview(data + trailer))
        assert outcome.record == CASES[name]
        assert outcome.next_position == len(data)


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_golden_record_decodes_at_a_position_inside_a_larger_buffer(name):
    data = golden(name)
    prefix = golden("v1_ipv4")
    outcome = decode_record(prefix + data + b"\x00" * 8, len(prefix))
    assert outcome.record == CASES[name]
    assert outcome.position == len(prefix)


def test_blank_golden_decodes_to_padding_and_needs_8_bytes():
    data = golden("blank")
    assert data == struct.pack(">iI", BLANK_CASES["blank"], 0xCBD43194)
    assert decode_record(data) == BlankPadding(0, BLANK_CASES["blank"])
    for cut in range(8):
        assert decode_record(data[:cut]) == NeedMoreData(cut, 8)
    assert decode_record(data + b"\x00" * 100) == BlankPadding(0, BLANK_CASES["blank"])


def test_v1_golden_fields_sit_at_the_spec_offsets():
    # Spec 1.2 with both hosts IPv4 and v1: STORETIMESTAMP at 56, BODYLENGTH at 84, BODY at 88.
    data = golden("v1_ipv4")
    record = CASES["v1_ipv4"]
    assert struct.unpack_from(">i", data, 0)[0] == 91 + 14 + 9 + len(record.properties) == 214
    assert data[4:8] == bytes.fromhex("daa320a7")
    assert struct.unpack_from(">i", data, 8)[0] == 1774740973  # spec 1.5 "Hello RocketMQ"
    assert struct.unpack_from(">iiqqiq", data, 12) == (1, 0, 42, 1073743058, 0, 1700000000000)
    assert data[48:56] == bytes.fromhex("c0a80064") + struct.pack(">i", 53412)
    assert struct.unpack_from(">q", data, 56)[0] == 1700000000123
    assert data[64:72] == bytes.fromhex("C0A8000100002A9F")  # as in the spec's msg id example
    assert struct.unpack_from(">iqi", data, 72) == (0, 0, 14)
    assert data[88:102] == b"Hello RocketMQ"
    assert data[102] == 9 and data[103:112] == b"TopicTest"
    assert struct.unpack_from(">h", data, 112)[0] == 100
    assert data[114:] == (
        b"KEYS\x01key1 key2\x02UNIQ_KEY\x01C0A8006414A418B4AAC2A1B2C3D40001\x02"
        b"CLUSTER\x01DefaultCluster\x02WAIT\x01true\x02TAGS\x01TagA\x02"
    )


def test_v2_golden_has_a_two_byte_topic_length_and_v2_magic():
    data = golden("v2_long_topic")
    assert data[4:8] == bytes.fromhex("daa320ab")
    assert struct.unpack_from(">h", data, 88 + 8)[0] == len(CASES["v2_long_topic"].topic) == 142
    assert decode_record(data).magic_version == 2


def test_ipv6_goldens_move_store_timestamp_and_body_by_the_host_sizes():
    both = golden("ipv6_hosts")
    assert struct.unpack_from(">i", both, 36)[0] == 0x30
    assert struct.unpack_from(">q", both, 48 + 20)[0] == CASES["ipv6_hosts"].store_timestamp_ms
    assert struct.unpack_from(">i", both, 68 + 20 + 20)[0] == len(b"over IPv6")  # BODYLENGTH
    born_only = golden("ipv6_born_only")
    assert struct.unpack_from(">q", born_only, 68)[0] == CASES["ipv6_born_only"].store_timestamp_ms
    assert len(born_only) == 74 + 20 + 8 + 1 + len(b"mixed") + len(b"TopicTest")


def test_properties_goldens_differ_only_by_the_trailing_separator():
    with_sep = CASES["v1_ipv4"].properties
    without = CASES["props_no_trailing_separator"].properties
    assert with_sep == without + "\x02"
    assert len(golden("props_no_trailing_separator")) == 91 + 9 + 9 + len(without)


@pytest.mark.parametrize("name", sorted(CRC_CASES))
def test_record_crc_goldens_encode_decode_and_carry_the_spec_digits(name):
    data = golden(name)
    record = CRC_CASES[name]
    assert encode_record(record, record_crc=True) == data
    outcome = decode_record(data, check_crc=True)
    # The separator inserted before the property (properties without a trailing one) stays.
    props = record.properties if record.properties.endswith("\x02") else record.properties + "\x02"
    assert outcome == DecodedRecord(dataclasses.replace(record, properties=props), 0, len(data), 1)
    (props_size,) = struct.unpack_from(">h", data, len(data) - len(props) - 22)
    assert props_size == len(props) + RECORD_CRC_BYTES
    tail = data[-RECORD_CRC_BYTES:]
    assert tail[:9] == b"__CRC32#\x01" and tail[-1:] == b"\x02"
    crc = zlib.crc32(data[:-RECORD_CRC_BYTES]) & 0x7FFFFFFF  # independent of the codec
    assert tail[9:19] == str(crc)[::-1].ljust(10, "0").encode()
