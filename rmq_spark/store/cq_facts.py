"""Put-time facts -> ConsumeQueue units: the live dispatch path, with no record read back.

Owns ``PendingUnits``, what the put path hands the dispatch thread for every record it
writes (under the put lock, before the record's bytes become readable, so every record below
the acknowledged end has its facts here), and ``FactUnits``, which turns the facts of a range
of records into each queue's packed units, whole columns at a time. Which records get a unit
and their tagsCode is ``cq_rule.py``'s, as for the recovery scan (``cq_dispatch``).

A fact is one tuple per put call, never one object per record of a batch:

* ``SingleFact``: ``(physical_offset, size, topic, queue_id, queue_offset, sys_flag, tags,
  properties, store_timestamp_ms, uniq_key)`` of one record;
* ``BatchFact``: the same fields as columns (ascending physical offsets), one store
  timestamp (or a column of them: a slave's replicated records); ``tags`` ``None``: read
  TAGS from ``properties``; ``properties`` ``None``:
  every record's properties are only its TAGS and the ``uniq_key`` (``cq_rule.unit_tags_code``;
  the IndexFile reads that key, ``index_dispatch.py``); with ``properties``, the IndexFile
  reads UNIQ_KEY and KEYS there and ``uniq_key`` may be ``None``.
"""

from __future__ import annotations

import logging
import struct
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from itertools import compress, repeat
from operator import itemgetter
from typing import cast

from rmq_spark.store.consume_queue import UNIT
from rmq_spark.store.cq_rule import SPECIAL_TOPICS, TagsCodes, dispatches, unit_tags_code

__all__ = ["BatchFact", "FactUnits", "PendingUnits", "Run", "SingleFact", "pack_units"]

SingleFact = tuple[int, int, str, int, int, int, str | None, str | None, int, str | None]
BatchFact = tuple[
    Sequence[int],
    Sequence[int],
    Sequence[str],
    Sequence[int],
    Sequence[int],
    Sequence[int],
    Sequence[str | None] | None,
    Sequence[str | None] | None,
    int | Sequence[int],
    Sequence[str | None] | None,
]
Fact = SingleFact | BatchFact
Column = Sequence[int] | int
"""A column of ints, or the int every record has."""
Run = tuple[int, int, list[bytes]]
"""``(first queue offset, unit count, packed units)`` of consecutive units of one queue
(the units in pieces, to be joined once)."""

_MAX_STRIDE = 64
_TRANSPOSE = 256  # single-record facts transposed at a time (zip of many is slower per fact)
_FIRST = itemgetter(0)
_log = logging.getLogger(__name__)


def _start(fact: Fact) -> int:
    first = fact[0]
    return first if type(first) is int else cast("Sequence[int]", first)[0]


def _discard(_fact: Fact) -> None:
    return None


class PendingUnits:
    """Facts of written records not dispatched yet, in log order.

    The put path calls ``add`` under the put lock before the record is readable, and
    ``drop_from`` when that write failed; the dispatch thread calls ``take``. Only the put
    path appends and drops (at the right), only the dispatcher takes (at the left), and a
    dropped fact never lies below the acknowledged end: no lock between them.
    """

    def __init__(self) -> None:
        self._facts: deque[Fact] = deque()
        self.add: Callable[[Fact], None] = self._facts.append

    def __len__(self) -> int:
        return len(self._facts)

    def last_batch_size(self) -> int:
        """How many records the newest fact has if it is a batch's (0 for a single put's,
        or when there is none: the dispatcher may just have taken it)."""
        try:
            first = self._facts[-1][0]
        except IndexError:
            return 0
        return 0 if type(first) is int else len(cast("Sequence[int]", first))

    def drop_from(self, physical_offset: int) -> None:
        """Forget the facts of records at or past ``physical_offset`` (a write that failed
        and was undone)."""
        facts = self._facts
        while facts and _start(facts[-1]) >= physical_offset:
            facts.pop()

    def take(self, end: int) -> list[Fact]:
        """Remove and return the facts of records that start below ``end``."""
        facts = self._facts
        # Usually all of them: popped without a look at each. The put path may append facts
        # meanwhile (past the ``count`` taken), or drop some (never below ``end``: if the
        # ``count``-th is below it, the drop is past it).
        count = len(facts)
        try:
            first = facts[count - 1][0] if count else end
        except IndexError:  # dropped meanwhile
            first = end
        last = first if type(first) is int else cast("Sequence[int]", first)[-1]
        if last < end:
            pop = facts.popleft
            return [pop() for _ in range(count)]
        taken: list[Fact] = []
        while facts:
            fact = facts[0]
            first = fact[0]
            if type(first) is int:
                if first >= end:
                    break
                taken.append(facts.popleft())
                continue
            offsets = cast("Sequence[int]", first)
            if offsets[0] >= end:
                break
            facts.popleft()
            if offsets[-1] < end:
                taken.append(fact)
                continue
            cut = bisect_left(offsets, end)  # a batch that straddles the end: split it
            head, tail = _split(cast("BatchFact", fact), cut)
            taken.append(head)
            facts.appendleft(tail)
            break
        return taken

    def close(self) -> None:
        """Stop collecting (the dispatcher stopped): later ``add`` calls do nothing."""
        self.add = _discard
        self._facts.clear()


def _split(fact: BatchFact, cut: int) -> tuple[BatchFact, BatchFact]:
    def part(column: Sequence[object] | None, low: int, high: int | None) -> object:
        return None if column is None else column[low:high]

    ts, keys = fact[8], fact[9]
    if type(ts) is int:  # one store timestamp for the batch
        head = (*(part(c, 0, cut) for c in fact[:8]), ts, part(keys, 0, cut))
        tail = (*(part(c, cut, None) for c in fact[:8]), ts, part(keys, cut, None))
    else:  # a replica's batch: one per record
        head = (*(part(c, 0, cut) for c in fact[:9]), part(keys, 0, cut))
        tail = (*(part(c, cut, None) for c in fact[:9]), part(keys, cut, None))
    return cast("BatchFact", head), cast("BatchFact", tail)


def pack_units(offsets: Sequence[int], sizes: Column, codes: Column) -> bytes:
    """The 20-byte units (``consume_queue.UNIT``) of these columns (``sizes``, ``codes``: an
    int when the same for every unit), back to back: one ``Struct.pack`` per ``_PACK_UNITS``
    units, no Python step per unit; one size and tagsCode for all (the common case) pack as
    12 bytes repeated."""
    n = len(offsets)
    if type(sizes) is int and type(codes) is int:
        flat: list[object] = [_TAIL.pack(sizes, codes)] * (2 * n)
        flat[0::2] = offsets
        per_unit, shapes = 2, _SAME_TAIL
    else:
        flat = [0] * (3 * n)
        flat[0::3] = offsets
        flat[1::3] = [sizes] * n if type(sizes) is int else cast("Sequence[int]", sizes)
        flat[2::3] = [codes] * n if type(codes) is int else cast("Sequence[int]", codes)
        per_unit, shapes = 3, _UNITS
    if n <= _PACK_UNITS:
        return shapes[n].pack(*flat)
    step = _PACK_UNITS * per_unit
    pieces = [
        shapes[_PACK_UNITS].pack(*flat[at : at + step])
        for at in range(0, len(flat) - step + 1, step)
    ]
    rest = n % _PACK_UNITS
    if rest:
        pieces.append(shapes[rest].pack(*flat[len(flat) - rest * per_unit :]))
    return b"".join(pieces)


class _Shapes(dict[int, struct.Struct]):
    """``Struct`` of ``n`` units by ``n`` (at most ``_PACK_UNITS``), compiled once."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self._unit = unit

    def __missing__(self, n: int) -> struct.Struct:
        shape = self[n] = struct.Struct(">" + self._unit * n)
        return shape


_PACK_UNITS = 256
_UNIT_FIELDS = UNIT.format.lstrip(">")  # "qiq": the one unit layout (consume_queue.py)
_TAIL = struct.Struct(">" + _UNIT_FIELDS[1:])  # size and tagsCode
_SAME_TAIL = _Shapes(f"{_UNIT_FIELDS[0]}{_TAIL.size}s")
_UNITS = _Shapes(_UNIT_FIELDS)


class FactUnits:
    """Builds each queue's units from facts (the dispatch thread's; keeps a TAGS cache)."""

    def __init__(self, delay_levels_ms: tuple[int, ...]) -> None:
        self._levels = delay_levels_ms
        self._codes = TagsCodes()

    def runs(self, facts: list[Fact], min_offset: int) -> dict[tuple[str, int], list[Run]]:
        """The units of ``facts``' records, per queue in queue offset order; records below
        ``min_offset`` (deleted by retention before they were dispatched) get none."""
        out: dict[tuple[str, int], list[Run]] = {}
        if list(map(type, map(_FIRST, facts))).count(int) == len(facts):  # single puts only
            for at in range(0, len(facts), _TRANSPOSE):
                chunk = cast("list[SingleFact]", facts[at : at + _TRANSPOSE])
                self._add(out, _columns_of(chunk), min_offset)
        else:
            singles: list[SingleFact] = []
            for fact in facts:
                if type(fact[0]) is int:
                    singles.append(fact)
                    if len(singles) < _TRANSPOSE:
                        continue
                if singles:
                    self._add(out, _columns_of(singles), min_offset)
                    singles = []
                if type(fact[0]) is not int:
                    self._add(out, cast("BatchFact", fact), min_offset)
            if singles:
                self._add(out, _columns_of(singles), min_offset)
        return out

    def _add(self, out: dict[tuple[str, int], list[Run]], fact: BatchFact, low: int) -> None:
        offsets, sizes, topics, queue_ids, queue_offsets, sys_flags, tags, props, stamp = fact[:9]
        ts: int | Sequence[int] = stamp  # a column for single puts' facts (``_columns_of``)
        n = len(offsets)
        if sys_flags.count(sys_flags[0]) == n:
            if not dispatches(sys_flags[0]):
                return
            keep: list[bool] | None = None
        else:
            keep = list(map(dispatches, sys_flags))
        if offsets[0] < low:
            _log.warning("ConsumeQueue dispatch skips records from %d: retention deleted "
                         "them before their units were written", offsets[0])  # fmt: skip
            floor = [offset >= low for offset in offsets]
            keep = floor if keep is None else [a and b for a, b in zip(keep, floor, strict=True)]
        if keep is not None:
            offsets, sizes = list(compress(offsets, keep)), list(compress(sizes, keep))
            topics, queue_ids = list(compress(topics, keep)), list(compress(queue_ids, keep))
            queue_offsets = list(compress(queue_offsets, keep))
            tags = None if tags is None else list(compress(tags, keep))
            props = None if props is None else list(compress(props, keep))
            if type(ts) is not int:  # single puts' facts: a store timestamp per record
                ts = list(compress(cast("Sequence[int]", ts), keep))
            n = len(offsets)
            if not n:
                return
        one_topic = topics.count(topics[0]) == n
        special = (
            topics[0] in SPECIAL_TOPICS if one_topic else not SPECIAL_TOPICS.isdisjoint(topics)
        )
        codes = self._tags_codes(special, topics, tags, props, ts, n)
        size: Column = sizes[0] if sizes.count(sizes[0]) == n else sizes
        if one_topic:
            topic = topics[0]
            if queue_ids.count(queue_ids[0]) == n:
                _extend(out, (topic, queue_ids[0]), queue_offsets, offsets, size, codes)
                return
            k = _stride(queue_ids, n)
            if k:  # round robin over the queues (what producers do by default)
                for j in range(k):
                    count = (n - 1 - j) // k + 1
                    ends = (queue_offsets[j], queue_offsets[j + (count - 1) * k])
                    consecutive = ends[1] - ends[0] == count - 1
                    _extend(
                        out, (topic, queue_ids[j]),
                        ends if consecutive else queue_offsets[j::k],
                        offsets[j::k],
                        size if type(size) is int else cast("list[int]", size)[j::k],
                        codes if type(codes) is int else cast("list[int]", codes)[j::k],
                    )  # fmt: skip
                return
        by_key: dict[tuple[str, int], list[int]] = {}
        for index, key in enumerate(zip(topics, queue_ids, strict=True)):
            indexes = by_key.get(key)
            if indexes is None:
                by_key[key] = [index]
            else:
                indexes.append(index)
        for key, indexes in by_key.items():
            _extend(
                out, key, [queue_offsets[i] for i in indexes], [offsets[i] for i in indexes],
                size if type(size) is int else [sizes[i] for i in indexes],
                codes if type(codes) is int else [cast("list[int]", codes)[i] for i in indexes],
            )  # fmt: skip

    def _tags_codes(
        self,
        special: bool,
        topics: Sequence[str],
        tags: Sequence[str | None] | None,
        props: Sequence[str | None] | None,
        ts: int | Sequence[int],
        n: int,
    ) -> Column:
        """Each record's tagsCode, or the one they all have."""
        if props is None and tags is not None and not special:
            if tags.count(tags[0]) == n:  # unit_tags_code's first branch, by column
                return self._codes[tags[0]]
            return self._codes.codes(tags)
        levels = self._levels
        return list(
            map(
                unit_tags_code, topics, repeat(None, n) if props is None else props,
                repeat(None, n) if tags is None else tags,
                repeat(ts, n) if type(ts) is int else cast("Sequence[int]", ts),
                repeat(levels, n),
            )
        )  # fmt: skip


def _stride(queue_ids: Sequence[int], n: int) -> int:
    """``k`` when record ``i`` goes to the ``i % k``-th of ``k`` distinct queues, else 0:
    the column repeats with period ``k`` (one comparison of two slices, in C), where ``k``
    is where the first queue id comes again, and its first ``k`` ids differ."""
    try:
        k = queue_ids.index(queue_ids[0], 1, _MAX_STRIDE + 1)
    except ValueError:
        return 0
    if k * 2 > n or queue_ids[k:] != queue_ids[:-k] or len(set(queue_ids[:k])) != k:
        return 0
    return k


def _columns_of(singles: list[SingleFact]) -> BatchFact:
    """Single-record facts as one batch (a transpose in C)."""
    columns = list(zip(*singles))  # noqa: B905 - every fact has 10 fields
    props = columns[7]
    return cast(
        "BatchFact",
        (*columns[:7], None if props.count(None) == len(props) else props, *columns[8:]),
    )


def _extend(
    out: dict[tuple[str, int], list[Run]],
    key: tuple[str, int],
    queue_offsets: Sequence[int],
    offsets: Sequence[int],
    sizes: Column,
    codes: Column,
) -> None:
    """Add one queue's units (ascending ``queue_offsets``, or the first and last of them
    when they are consecutive), packed at once, to its runs of consecutive offsets."""
    runs = out.get(key)
    if runs is None:
        runs = out[key] = []
    n = len(offsets)
    first = queue_offsets[0]
    if queue_offsets[-1] - first != n - 1:  # not consecutive (never from the appender)
        for i in range(n):
            _extend(
                out, key, queue_offsets[i : i + 1], offsets[i : i + 1],
                sizes if type(sizes) is int else cast("Sequence[int]", sizes)[i : i + 1],
                codes if type(codes) is int else cast("Sequence[int]", codes)[i : i + 1],
            )  # fmt: skip
        return
    packed = pack_units(offsets, sizes, codes)
    if runs:
        last_first, last_count, pieces = runs[-1]
        if last_first + last_count == first:
            pieces.append(packed)
            runs[-1] = (last_first, last_count + n, pieces)
            return
    runs.append((first, n, [packed]))
