"""Unit tests of store/codec.py: outcomes, validation, corruption detection, patching."""

from __future__ import annotations

import dataclasses
import mmap
import struct

import pytest
from store_helpers import stored_form

from rmq_spark.errors import CorruptRecordError, InvalidMessageError, StoreError
from rmq_spark.store.codec import (
    MIN_RECORD_SIZE_BYTES,
    BlankPadding,
    DecodedRecord,
    NeedMoreData,
    SkippedRecord,
    Unwritten,
    body_crc,
    decode_record,
    encode_blank,
    encode_record,
    encode_record_mutable,
    peek_header,
    record_size,
    store_timestamp_position,
)
from rmq_spark.store.message import HostAddress, MessageRecord

V4 = HostAddress("10.1.2.3", 4567)
V6 = HostAddress("fe80::1", 10911)


def message(**changes: object) -> MessageRecord:
    base = MessageRecord(
        topic="TopicTest",
        body=b"Hello RocketMQ",
        properties="TAGS\x01TagA\x02KEYS\x01k1\x02",
        queue_id=3,
        flag=7,
        queue_offset=11,
        physical_offset=4096,
        sys_flag=0,
        born_timestamp_ms=1_700_000_000_000,
        born_host=V4,
        store_timestamp_ms=1_700_000_000_500,
        store_host=HostAddress("192.168.0.1", 10911),
        reconsume_times=2,
        prepared_transaction_offset=0,
    )
    return dataclasses.replace(base, **changes)


# --- BODYCRC and the length formula -------------------------------------------------------------


def test_body_crc_matches_the_spec_test_vectors():
    assert body_crc(b"Hello RocketMQ") == 1774740973
    assert body_crc(b"123456789") == 1274296614  # raw CRC 0xCBF43926, top bit masked
    assert body_crc(b"") == 0


@pytest.mark.parametrize(
    ("born_v6", "store_v6", "v2", "fixed"),
    [
        (False, False, False, 91),
        (True, True, False, 115),
        (True, False, False, 103),
        (False, True, False, 103),
        (False, False, True, 92),
        (True, True, True, 116),
    ],
)
def test_record_size_follows_the_length_formula(born_v6, store_v6, v2, fixed):
    assert record_size(9, 100, 20, born_v6, store_v6, v2) == fixed + 9 + 100 + 20


@pytest.mark.parametrize(
    ("born", "store"), [(V4, V4), (V6, V4), (V4, V6), (V6, V6)], ids=["44", "64", "46", "66"]
)
def test_encoded_length_equals_record_size_for_every_host_combination(born, store):
    record = message(born_host=born, store_host=store)
    data = encode_record(record)
    props = len(record.properties.encode())
    assert len(data) == record_size(9, 14, props, born.is_ipv6, store.is_ipv6, False)
    assert struct.unpack_from(">i", data, 0)[0] == len(data)


# --- encoder choices ----------------------------------------------------------------------------


def test_encode_uses_v1_up_to_127_topic_chars_and_v2_beyond():
    assert decode_record(encode_record(message(topic="t" * 127))).magic_version == 1
    assert decode_record(encode_record(message(topic="t" * 128))).magic_version == 2


def test_encode_counts_topic_length_in_utf16_code_units():
    # 126 chars + one emoji = 128 UTF-16 code units (the emoji is a surrogate pair): v2.
    data = encode_record(message(topic="t" * 126 + "😀"))
    assert data[4:8] == bytes.fromhex("daa320ab")


def test_encode_uses_v2_when_utf8_topic_exceeds_127_bytes_even_if_short_in_chars():
    # 64 x "é" = 64 UTF-16 units but 128 UTF-8 bytes: a v1 signed-byte length cannot hold it.
    outcome = decode_record(encode_record(message(topic="é" * 64)))
    assert outcome.magic_version == 2
    assert outcome.record.topic == "é" * 64


def test_encode_sets_ipv6_sysflag_bits_from_the_host_types_and_clears_stale_ones():
    both = decode_record(encode_record(message(born_host=V6, store_host=V6))).record
    assert both.sys_flag & 0x30 == 0x30
    stale = decode_record(encode_record(message(sys_flag=0x30 | 0x8))).record
    assert stale.sys_flag == 0x8


def test_encode_accepts_the_body_crc_it_would_compute():
    record = message(body_crc=1774740973)
    assert encode_record(record) == encode_record(message())


def test_stored_form_is_what_decode_returns():
    record = message(born_host=V6, sys_flag=0x1)
    assert decode_record(encode_record(record)).record == stored_form(record)
    assert stored_form(record).sys_flag == 0x11
    assert stored_form(record).body_crc == 1774740973


def test_encode_record_mutable_gives_the_same_bytes_in_a_bytearray():
    mutable = encode_record_mutable(message())
    assert isinstance(mutable, bytearray)
    assert bytes(mutable) == encode_record(message())


# --- encoder validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"topic": ""}, "topic"),
        ({"topic": "t" * 32768}, "topic"),
        ({"topic": "bad\ud800surrogate"}, "topic"),
        ({"properties": "k\x01" + "v" * 32766}, "properties"),
        ({"properties": "lone \udc00 surrogate"}, "properties"),
        ({"queue_id": -1}, "queue_id"),
        ({"queue_id": 1 << 31}, "queue_id"),
        ({"flag": 1 << 31}, "flag"),
        ({"flag": -(1 << 31) - 1}, "flag"),
        ({"queue_offset": -1}, "queue_offset"),
        ({"physical_offset": -5}, "physical_offset"),
        ({"physical_offset": 1 << 63}, "physical_offset"),
        ({"sys_flag": 1 << 31}, "sys_flag"),
        ({"born_timestamp_ms": 1 << 63}, "born_timestamp_ms"),
        ({"store_timestamp_ms": -(1 << 63) - 1}, "store_timestamp_ms"),
        ({"reconsume_times": 1 << 31}, "reconsume_times"),
        ({"prepared_transaction_offset": 1 << 64}, "prepared_transaction_offset"),
        ({"queue_id": "3"}, "queue_id"),
        ({"body": "text, not bytes"}, "body"),
        ({"body_crc": 12345}, "body_crc"),
        ({"born_host": "10.0.0.1:80"}, "born_host"),
    ],
)
def test_encode_rejects_invalid_fields_naming_them(changes, field):
    with pytest.raises(InvalidMessageError) as info:
        encode_record(message(**changes))
    assert info.value.field == field
    assert isinstance(info.value, StoreError)
    assert field in str(info.value)


def test_encode_accepts_the_largest_topic_and_properties():
    record = message(topic="t" * 32767, properties="k\x01" + "v" * 32765)
    outcome = decode_record(encode_record(record))
    assert outcome.record == stored_form(record)
    assert len(outcome.record.properties.encode()) == 32767


def test_property_limit_counts_utf8_bytes_not_characters():
    with pytest.raises(InvalidMessageError):
        encode_record(message(properties="k\x01" + "é" * 16383))  # 2 + 32766 bytes


# --- decoder outcomes ---------------------------------------------------------------------------


def test_decode_returns_unwritten_on_zero_header():
    assert decode_record(bytes(100), 40) == Unwritten(40)


def test_decode_needs_eight_bytes_before_it_can_tell_anything():
    for have in range(8):
        assert decode_record(bytes(have)) == NeedMoreData(have, 8)


def test_decode_returns_blank_padding_with_the_remaining_size():
    data = encode_record(message()) + encode_blank(4000)
    first = decode_record(data)
    assert decode_record(data, first.next_position) == BlankPadding(first.next_position, 4000)


def test_decode_walks_three_records_a_blank_and_unwritten_space():
    records = [message(queue_offset=i, physical_offset=i * 1000) for i in range(3)]
    blob = b"".join(encode_record(r) for r in records)
    buf = bytearray(blob + encode_blank(300) + bytes(292))
    position, seen = 0, []
    while True:
        outcome = decode_record(buf, position)
        if not isinstance(outcome, DecodedRecord):
            break
        seen.append(outcome.record)
        position = outcome.next_position
    assert seen == [stored_form(r) for r in records]
    assert outcome == BlankPadding(len(blob), 300)
    assert decode_record(buf, len(blob) + 8) == Unwritten(len(blob) + 8)


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "mmap"])
def test_decode_accepts_every_buffer_type(kind):
    data = encode_record(message())
    if kind == "mmap":
        buf = mmap.mmap(-1, len(data) + 16)
        buf[: len(data)] = data
    else:
        buf = {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data)}[kind]
    outcome = decode_record(buf)
    assert outcome.record == stored_form(message())
    assert type(outcome.record.body) is bytes


def test_decoded_record_is_a_real_frozen_message_record():
    outcome = decode_record(encode_record(message()))
    assert type(outcome) is DecodedRecord and type(outcome.record) is MessageRecord
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.record.topic = "other"  # type: ignore[misc]
    assert hash(outcome.record) == hash(stored_form(message()))


def test_decode_without_body_keeps_everything_else_and_still_checks_crc():
    data = bytearray(encode_record(message()))
    outcome = decode_record(data, with_body=False)
    assert outcome.record == dataclasses.replace(stored_form(message()), body=b"")
    data[88] ^= 0x01  # first body byte
    with pytest.raises(CorruptRecordError):
        decode_record(data, with_body=False)


def test_decode_without_crc_check_accepts_a_changed_body():
    data = bytearray(encode_record(message()))
    data[88] ^= 0x01
    outcome = decode_record(data, check_crc=False)
    assert outcome.record.body == b"Iello RocketMQ"
    assert outcome.record.body_crc == 1774740973  # the stored one


def test_decode_topics_filter_skips_other_topics_and_keeps_asked_ones():
    a = encode_record(message(topic="A"))
    b = encode_record(message(topic="B"))
    buf = a + b
    assert decode_record(buf, 0, topics={"B"}) == SkippedRecord(0, len(a))
    assert decode_record(buf, len(a), topics={"B"}).record.topic == "B"


def test_decode_topics_filter_still_detects_a_corrupt_skipped_record():
    data = bytearray(encode_record(message(topic="A")))
    data[90] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="BODYCRC"):
        decode_record(data, topics={"B"})


# --- decoder errors -----------------------------------------------------------------------------


def corrupt(data: bytes | bytearray, position: int = 0, **kw: object) -> CorruptRecordError:
    with pytest.raises(CorruptRecordError) as info:
        decode_record(data, position, **kw)
    return info.value


def test_decode_rejects_a_bad_magic_naming_path_and_position():
    data = bytes(16) + struct.pack(">iI", 200, 0x12345678) + bytes(200)
    err = corrupt(data, 16, path="00000000000000000000")
    assert (err.path, err.position) == ("00000000000000000000", 16)
    assert "0x12345678" in str(err)
    assert "00000000000000000000" in str(err) and "position 16" in str(err)


def test_decode_rejects_a_nonzero_size_with_zero_magic():
    assert "magic" in corrupt(struct.pack(">iI", 91, 0) + bytes(91)).reason


def test_decode_rejects_crc_mismatch_with_stored_and_computed_values():
    data = bytearray(encode_record(message()))
    data[95] ^= 0x40
    err = corrupt(data)
    assert err.stored_crc == 1774740973
    assert err.computed_crc == body_crc(bytes(data[88:102]))
    assert "stored 0x69c865ed" in str(err)


@pytest.mark.parametrize("size", [-1, 0, 8, MIN_RECORD_SIZE_BYTES - 1])
def test_decode_rejects_impossible_total_sizes(size):
    data = bytearray(encode_record(message()))
    struct.pack_into(">i", data, 0, size)
    assert "TOTALSIZE" in corrupt(data).reason


def test_decode_rejects_total_size_that_disagrees_with_the_length_formula():
    data = bytearray(encode_record(message()) + bytes(4))
    struct.pack_into(">i", data, 0, len(data))
    assert "length formula" in corrupt(data).reason


@pytest.mark.parametrize(("offset", "value"), [(84, -1), (84, 10_000), (84, 15)])
def test_decode_rejects_a_body_length_that_does_not_fit(offset, value):
    data = bytearray(encode_record(message()))
    struct.pack_into(">i", data, offset, value)
    with pytest.raises(CorruptRecordError):
        decode_record(data)


def test_decode_rejects_ipv6_flags_on_a_record_too_small_for_them():
    data = bytearray(encode_record(message(topic="T", body=b"", properties="")))
    struct.pack_into(">i", data, 36, 0x30)
    with pytest.raises(CorruptRecordError):
        decode_record(data)


def test_decode_rejects_blank_with_impossible_size():
    with pytest.raises(CorruptRecordError, match="BLANK"):
        decode_record(struct.pack(">iI", 4, 0xCBD43194))


def test_decode_rejects_a_topic_that_is_not_utf8():
    data = bytearray(encode_record(message(topic="T")))
    data[88 + 14 + 1] = 0xFF
    assert "topic" in corrupt(data).reason


def test_decode_rejects_properties_that_are_not_utf8():
    data = bytearray(encode_record(message()))
    data[-2] = 0xC3  # a lead byte followed by \x02
    assert "properties" in corrupt(data).reason


def test_decode_of_a_bigger_claimed_size_needs_more_data():
    data = bytearray(encode_record(message()))
    struct.pack_into(">i", data, 0, 10_000)
    assert decode_record(data) == NeedMoreData(len(data), 10_000)


# --- single-byte damage: never a silent wrong body ----------------------------------------------


@pytest.mark.parametrize(
    ("born", "store", "topic"),
    [(V4, V4, "TopicTest"), (V6, V6, "TopicTest"), (V4, V6, "t" * 130)],
    ids=["v1-44", "v1-66", "v2-46"],
)
def test_flipping_any_byte_is_detected_or_changes_a_visible_field(born, store, topic):
    original = stored_form(message(born_host=born, store_host=store, topic=topic))
    data = encode_record(original)
    for index in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(data)
            damaged[index] ^= mask
            try:
                outcome = decode_record(damaged)
            except CorruptRecordError as err:
                assert err.position == 0
                continue
            if isinstance(outcome, NeedMoreData):  # TOTALSIZE grew: a scanner sees the tail
                assert index < 4
                continue
            assert isinstance(outcome, DecodedRecord), (index, mask, outcome)
            assert outcome.record != original, (index, mask)
            assert outcome.record.body == original.body, (index, mask)


# --- positions and peek -------------------------------------------------------------------------


def test_store_timestamp_position_depends_on_the_born_host_only():
    assert store_timestamp_position(0) == 56
    assert store_timestamp_position(0x20) == 56
    assert store_timestamp_position(0x10) == 68
    assert store_timestamp_position(0x30 | 0x8) == 68


def test_peek_header_reads_size_and_magic_without_validating():
    data = encode_record(message())
    assert peek_header(data) == (len(data), 0xDAA320A7)
    assert peek_header(encode_blank(64)) == (64, 0xCBD43194)
    assert peek_header(bytes(8)) == (0, 0)
    assert peek_header(data[:7]) == NeedMoreData(7, 8)
    assert peek_header(data, len(data) - 3) == NeedMoreData(3, 8)


@pytest.mark.parametrize("remaining", [7, -8, 1 << 31])
def test_encode_blank_rejects_impossible_remaining_sizes(remaining):
    with pytest.raises(ValueError, match="remaining_bytes"):
        encode_blank(remaining)


def test_encode_blank_is_size_and_magic():
    assert encode_blank(8) == bytes.fromhex("00000008cbd43194")


def test_decode_refuses_a_position_past_the_end_of_the_buffer():
    with pytest.raises(ValueError, match="outside the buffer"):
        decode_record(bytes(10), 11)
