"""PURE: the 20-byte ConsumeQueue unit (FORMAT.md 6).

Owns the unit layout (int64 physical offset, int32 TOTALSIZE, int64 tagsCode, big-endian),
its validity rule (6.6) and the pre-blank filler unit (6.2). Does not own CQ files, their
directories or recovery (the engine), or how tagsCode is computed (``hashing.py``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from rmq_spark.store.layout import CQ_UNIT_SIZE_BYTES

__all__ = [
    "CqUnit",
    "PRE_BLANK_UNIT",
    "decode_cq_unit",
    "encode_cq_unit",
    "iter_cq_units",
]

_UNIT = struct.Struct(">qiq")
assert _UNIT.size == CQ_UNIT_SIZE_BYTES


@dataclass(frozen=True, slots=True)
class CqUnit:
    """One ConsumeQueue entry: where a record is in the CommitLog, its size and tag hash."""

    physical_offset: int
    size: int
    tags_code: int

    @property
    def is_valid(self) -> bool:
        """RocketMQ's test for a written unit: offset >= 0 and size > 0 (FORMAT.md 6)."""
        return self.physical_offset >= 0 and self.size > 0

    @property
    def names_record(self) -> bool:
        """Valid and not the pre-blank filler (6.2): a unit a consumer may read a record by."""
        return self.is_valid and self.size != PRE_BLANK_UNIT.size


PRE_BLANK_UNIT = CqUnit(0, 0x7FFFFFFF, 0)
"""Filler RocketMQ writes before the first unit of a queue that starts past offset 0."""


def encode_cq_unit(physical_offset: int, size: int, tags_code: int) -> bytes:
    """The 20 bytes of one unit.

    Raises
    ------
    ValueError
        A negative ``physical_offset``, a ``size`` outside ``1..2**31-1``, or a value that
        does not fit its int64 field.

    Examples
    --------
    >>> encode_cq_unit(0, 200, 2598919).hex()
    '0000000000000000000000c8000000000027a807'
    """
    if not 0 <= physical_offset < (1 << 63):
        raise ValueError(f"physical_offset: {physical_offset} is outside [0, 2**63)")
    if not 0 < size < (1 << 31):
        raise ValueError(f"size: {size} is outside [1, 2**31)")
    if not -(1 << 63) <= tags_code < (1 << 63):
        raise ValueError(f"tags_code: {tags_code} does not fit int64")
    return _UNIT.pack(physical_offset, size, tags_code)


def decode_cq_unit(buf: bytes | bytearray | memoryview, position: int = 0) -> CqUnit:
    """The unit at byte ``position`` of ``buf`` (no validity check: see ``CqUnit.is_valid``).

    Raises
    ------
    ValueError
        Fewer than 20 bytes left at ``position``.
    """
    if len(buf) - position < CQ_UNIT_SIZE_BYTES:
        raise ValueError(f"a CQ unit needs 20 bytes at position {position}, buffer has {len(buf)}")
    return CqUnit(*_UNIT.unpack_from(buf, position))


def iter_cq_units(buf: bytes | bytearray | memoryview) -> Iterator[CqUnit]:
    """Every whole unit in ``buf`` from position 0; a trailing partial unit is ignored."""
    whole = len(buf) - len(buf) % CQ_UNIT_SIZE_BYTES
    for fields in _UNIT.iter_unpack(memoryview(buf)[:whole]):
        yield CqUnit(*fields)
