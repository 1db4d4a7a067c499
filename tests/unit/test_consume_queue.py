"""Unit tests of store/consume_queue.py: the 20-byte CQ unit (spec 6.1, 6.2, 6.6)."""

from __future__ import annotations

import pytest

from rmq_spark.store.consume_queue import (
    PRE_BLANK_UNIT,
    CqUnit,
    decode_cq_unit,
    encode_cq_unit,
    iter_cq_units,
)


def test_unit_is_offset_size_tags_code_big_endian():
    data = encode_cq_unit(1073743058, 214, -1656969516)
    assert data == bytes.fromhex("00000000400004d2 000000d6 ffffffff9d3ca6d4")
    assert decode_cq_unit(data) == CqUnit(1073743058, 214, -1656969516)


def test_decode_reads_at_a_position_and_needs_20_bytes():
    blob = encode_cq_unit(0, 100, 1) + encode_cq_unit(100, 50, 2)
    assert decode_cq_unit(blob, 20) == CqUnit(100, 50, 2)
    with pytest.raises(ValueError, match="20 bytes"):
        decode_cq_unit(blob, 21)


def test_iter_cq_units_yields_whole_units_only():
    blob = b"".join(encode_cq_unit(i * 100, 100, i) for i in range(4)) + b"\x00" * 7
    assert [u.physical_offset for u in iter_cq_units(memoryview(blob))] == [0, 100, 200, 300]


def test_validity_is_non_negative_offset_and_positive_size():
    assert CqUnit(0, 1, 0).is_valid
    assert PRE_BLANK_UNIT.is_valid  # pre-blank filler units count as valid (spec 6.6)
    assert not CqUnit(0, 0, 0).is_valid  # zero-filled space
    assert not CqUnit(-1, 10, 0).is_valid


def test_pre_blank_unit_bytes():
    assert encode_cq_unit(
        PRE_BLANK_UNIT.physical_offset, PRE_BLANK_UNIT.size, PRE_BLANK_UNIT.tags_code
    ) == bytes.fromhex("0000000000000000 7fffffff 0000000000000000")


@pytest.mark.parametrize(
    ("offset", "size", "tags"),
    [(-1, 1, 0), (0, 0, 0), (0, -5, 0), (0, 1 << 31, 0), (1 << 63, 1, 0), (0, 1, 1 << 63)],
)
def test_encode_rejects_out_of_range_fields(offset, size, tags):
    with pytest.raises(ValueError):
        encode_cq_unit(offset, size, tags)


def test_a_consumer_reads_records_only_by_units_that_name_one() -> None:
    # The pre-blank filler passes RocketMQ's validity rule (offset >= 0, size > 0) but points
    # at no record: read by, it would deliver whatever record sits at offset 0.
    assert PRE_BLANK_UNIT.is_valid
    assert not PRE_BLANK_UNIT.names_record
    assert CqUnit(0, 200, 7).names_record
    assert not CqUnit(-1, 200, 7).names_record
