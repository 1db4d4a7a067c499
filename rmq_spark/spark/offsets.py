"""PURE: source offsets and partition planning over byte ranges of the CommitLog.

Owns the one offset shape (``{"physical_offset": N}``, built by ``offset_dict`` so that two
offsets compare with ``==``), cutting a physical-offset range into per-segment slices,
finding ranges whose segments are gone, and splitting slices into Spark partitions. Knows
segment names and sizes only as numbers; reading bytes is ``planner.py`` / ``columnar.py``.

Ownership rule: a slice ``[start_position, end_position)`` of a segment owns exactly the
records whose *first byte* lies in it. A slice may end inside a record (that record belongs
to it) and start inside one (its reader skips forward to the next record start). So any
set of slices that tiles a range reads each record of the range exactly once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rmq_spark.errors import SourceError
from rmq_spark.store.view import SegmentSpan

__all__ = [
    "OFFSET_KEY",
    "SegmentSlice",
    "SegmentSpan",
    "missing_ranges",
    "offset_dict",
    "parse_offset",
    "partition_count",
    "plan_partitions",
    "plan_slices",
]

OFFSET_KEY = "physical_offset"


def offset_dict(physical_offset: int) -> dict[str, int]:
    """The canonical source offset for a physical offset.

    Examples
    --------
    >>> offset_dict(4096)
    {'physical_offset': 4096}
    """
    assert physical_offset >= 0, physical_offset
    return {OFFSET_KEY: int(physical_offset)}


def parse_offset(offset: Mapping[str, object] | None, *, what: str = "offset") -> int:
    """The physical offset inside a source offset this source issued.

    Raises
    ------
    SourceError
        ``offset`` is not exactly ``{"physical_offset": <int >= 0>}``, e.g. a checkpoint of
        another source.
    """
    if isinstance(offset, Mapping) and set(offset) == {OFFSET_KEY}:
        value = offset[OFFSET_KEY]
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    raise SourceError(
        f"{what} {offset!r} was not issued by the rocketmq source; "
        f'expected {{"{OFFSET_KEY}": <integer >= 0>}}'
    )


@dataclass(frozen=True, slots=True)
class SegmentSlice:
    """The records of one segment whose first byte lies in ``[start_position, end_position)``.

    ``limit_position`` is how far records may extend (the readable end inside this segment).
    ``start_exact`` / ``end_exact`` say whether a position is known to be a record boundary
    (a segment start, an offset this source issued); an inexact one was cut by byte count
    and the reader re-synchronises there.
    """

    base_offset: int
    start_position: int
    end_position: int
    limit_position: int
    start_exact: bool = True
    end_exact: bool = True

    def __post_init__(self) -> None:
        assert 0 <= self.start_position <= self.end_position <= self.limit_position, self

    @property
    def size_bytes(self) -> int:
        return self.end_position - self.start_position

    @property
    def start_offset(self) -> int:
        return self.base_offset + self.start_position

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.end_position


def missing_ranges(spans: Sequence[SegmentSpan], start: int, end: int) -> list[tuple[int, int]]:
    """Sub-ranges of ``[start, end)`` that no segment covers (deleted or never present).

    ``spans`` must be sorted by base offset and not overlap.

    Examples
    --------
    >>> missing_ranges([SegmentSpan(100, 100)], 0, 250)
    [(0, 100), (200, 250)]
    """
    gaps: list[tuple[int, int]] = []
    cursor = start
    for span in spans:
        if span.end_offset <= cursor:
            continue
        if span.base_offset >= end:
            break
        if span.base_offset > cursor:
            gaps.append((cursor, span.base_offset))
        cursor = span.end_offset
        if cursor >= end:
            break
    if cursor < end:
        gaps.append((cursor, end))
    return gaps


def plan_slices(spans: Sequence[SegmentSpan], start: int, end: int) -> list[SegmentSlice]:
    """Cut ``[start, end)`` (both record boundaries) at segment boundaries.

    Parts of the range no segment covers are left out (see ``missing_ranges``). A slice
    that starts where a segment starts is exact, so is the range's own start and end.
    """
    slices: list[SegmentSlice] = []
    for span in spans:
        lo = max(start, span.base_offset)
        hi = min(end, span.end_offset)
        if lo >= hi:
            continue
        slices.append(
            SegmentSlice(
                base_offset=span.base_offset,
                start_position=lo - span.base_offset,
                end_position=hi - span.base_offset,
                limit_position=hi - span.base_offset,
            )
        )
    return slices


def partition_count(
    total_bytes: int, *, min_partitions: int, max_bytes_per_partition: int, min_split_bytes: int
) -> int:
    """How many partitions to read ``total_bytes`` with.

    At least ``ceil(total / max_bytes_per_partition)``, rounded up to a multiple of
    ``min_partitions`` (the cores to keep busy) so that the last wave of tasks fills every
    core; at least ``min_partitions`` too, but a range is not split into parts smaller than
    ``min_split_bytes`` to reach it.

    Examples
    --------
    >>> partition_count(10 << 20, min_partitions=2, max_bytes_per_partition=128 << 20,
    ...                 min_split_bytes=1 << 20)
    2
    >>> partition_count(300 << 20, min_partitions=2, max_bytes_per_partition=128 << 20,
    ...                 min_split_bytes=1 << 20)
    4
    >>> partition_count(1000, min_partitions=2, max_bytes_per_partition=128 << 20,
    ...                 min_split_bytes=1 << 20)
    1
    """
    if total_bytes <= 0:
        return 0
    cores = max(1, min_partitions)
    by_size = math.ceil(total_bytes / max_bytes_per_partition)
    if by_size > cores:
        return math.ceil(by_size / cores) * cores
    by_cores = min(cores, max(1, total_bytes // max(1, min_split_bytes)))
    return max(1, by_size, by_cores)


def plan_partitions(slices: Sequence[SegmentSlice], count: int) -> list[tuple[SegmentSlice, ...]]:
    """Split ``slices`` into ``count`` partitions of about equal byte size, in offset order.

    A cut inside a slice produces two slices marked inexact at the cut; the reader of the
    second one re-synchronises to the next record start (see the module docstring).
    """
    total = sum(s.size_bytes for s in slices)
    if total == 0 or count <= 0:
        return []
    target = math.ceil(total / count)
    partitions: list[tuple[SegmentSlice, ...]] = []
    current: list[SegmentSlice] = []
    room = target
    for piece in slices:
        while piece.size_bytes > room:
            cut = piece.start_position + room
            head = SegmentSlice(
                piece.base_offset,
                piece.start_position,
                cut,
                piece.limit_position,
                start_exact=piece.start_exact,
                end_exact=False,
            )
            current.append(head)
            partitions.append(tuple(current))
            current, room = [], target
            piece = SegmentSlice(
                piece.base_offset,
                cut,
                piece.end_position,
                piece.limit_position,
                start_exact=False,
                end_exact=piece.end_exact,
            )
        if piece.size_bytes > 0:
            current.append(piece)
            room -= piece.size_bytes
        if room == 0:
            partitions.append(tuple(current))
            current, room = [], target
    if current:
        partitions.append(tuple(current))
    return partitions
