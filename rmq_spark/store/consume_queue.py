"""PURE: the 20-byte ConsumeQueue unit (FORMAT.md 6).

Owns the unit layout (int64 physical offset, int32 TOTALSIZE, int64 tagsCode, big-endian) as
a ``struct`` (``UNIT``) and a numpy dtype (``UNIT_DTYPE``), its validity rule (6.6), the
pre-blank filler unit (6.2), the written end of a queue's last files (``written_count``:
RocketMQ ``ConsumeQueue.recover``), the first live unit after retention (``first_live``:
``correctMinOffset``) and the binary search of a queue by store time or physical offset
(``first_at_or_after``: ``getOffsetInQueueByTime``). Every reader and the writer use these;
nobody else declares the 20 bytes. Does not own CQ files, their directories or recovery
(``cq_files.py``, ``cq_view.py``), or how tagsCode is computed (``cq_rule.py``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from rmq_spark.store.layout import CQ_UNIT_SIZE_BYTES

__all__ = [
    "CqUnit",
    "PRE_BLANK_SIZE",
    "PRE_BLANK_UNIT",
    "UNIT",
    "UNIT_DTYPE",
    "decode_cq_unit",
    "encode_cq_unit",
    "first_at_or_after",
    "first_live",
    "iter_cq_units",
    "units_of",
    "written_count",
    "written_end",
]

UNIT = struct.Struct(">qiq")
"""One unit: CommitLog offset, size, tagsCode (FORMAT.md 6)."""
UNIT_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
"""``UNIT`` as a numpy record, for reading whole files."""
PRE_BLANK_SIZE = 0x7FFFFFFF
"""The size field of the pre-blank filler unit (``PRE_BLANK_UNIT``)."""
_UNIT = UNIT
assert UNIT.size == UNIT_DTYPE.itemsize == CQ_UNIT_SIZE_BYTES


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


PRE_BLANK_UNIT = CqUnit(0, PRE_BLANK_SIZE, 0)
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


def units_of(data: bytes | bytearray | memoryview) -> np.ndarray:
    """The whole units of ``data`` as a ``UNIT_DTYPE`` array (a trailing partial one left)."""
    whole = len(data) - len(data) % CQ_UNIT_SIZE_BYTES
    return np.frombuffer(data, UNIT_DTYPE, whole // CQ_UNIT_SIZE_BYTES)


def written_count(units: np.ndarray, previous: int = -1) -> tuple[int, int]:
    """How many units at the start of one of a queue's last files are written, and the last
    CommitLog offset they name (``previous`` if none): RocketMQ's recover rule, up to the
    first unit with an offset < 0, a size <= 0, or an offset below an earlier unit's (the
    pre-blank filler is written and names nothing). ``previous``: the last offset named by
    the file before (-1 for the first file looked at).

    Examples
    --------
    >>> written_count(units_of(encode_cq_unit(0, 90, 0) + encode_cq_unit(90, 90, 0) + bytes(20)))
    (2, 90)
    """
    phys = units["phys"].astype(np.int64)
    size = units["size"].astype(np.int64)
    blank = (phys == 0) & (size == PRE_BLANK_SIZE)
    named = np.where(blank, -1, phys)
    before = np.maximum.accumulate(np.concatenate(([previous], named[:-1])))
    bad = np.flatnonzero((phys < 0) | (size <= 0) | ((phys < before) & ~blank))
    count = int(bad[0]) if len(bad) else len(units)
    last = int(named[:count].max(initial=previous))
    return count, last


def written_end(
    bases: Sequence[int], written: Callable[[int, int], tuple[int, int, bool]]
) -> tuple[int, int | None]:
    """The end of a queue's written units, RocketMQ's recover: from the second-last file,
    file by file until one is not wholly written. ``written(base, previous)``: the file at
    ``base``'s ``written_count`` with ``previous``, and whether every unit of it is written.
    Returns the end (0 for no file) and the base of the file it is in (``None``: every file
    looked at is whole)."""
    end, previous = 0, -1
    for base in bases[-2:]:
        count, previous, whole = written(base, previous)
        end = base + count
        if not whole:
            return end, base
    return end, None


def first_live(units: np.ndarray, min_physical_offset: int) -> int:
    """Index of the first unit naming a record at or above ``min_physical_offset`` (the
    pre-blank filler never counts); ``len(units)`` if none (RocketMQ ``correctMinOffset``)."""
    live = (units["phys"] >= min_physical_offset) & (units["size"] != PRE_BLANK_SIZE)
    hits = np.flatnonzero(live & (units["size"] > 0))
    return int(hits[0]) if len(hits) else len(units)


def first_at_or_after(
    low: int, high: int, target: int, value_at: Callable[[int], int | None]
) -> int:
    """The first queue offset in ``[low, high)`` whose ``value_at`` is at least ``target``;
    ``high`` if none. ``value_at(queue_offset)``: the store time of its record (RocketMQ
    ``getOffsetInQueueByTime``) or its CommitLog offset, both growing along a queue; ``None``
    (or below ``target``) for a unit that names no record (the pre-blank filler, a record
    gone): the search looks later.
    """
    while low < high:
        middle = (low + high) // 2
        value = value_at(middle)
        if value is not None and value >= target:
            high = middle
        else:
            low = middle + 1
    return low
