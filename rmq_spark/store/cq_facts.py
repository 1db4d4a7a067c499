"""Put-time facts -> ConsumeQueue units: the live dispatch path, with no record read back.

Owns ``PendingUnits``, what the put path hands the dispatch thread for every record it
writes (under the put lock, before the record's bytes become readable, so every record below
the acknowledged end has its facts here), and ``FactUnits``, which turns the facts of a range
of records into each queue's packed units, whole columns at a time. Which records get a unit
and their tagsCode is ``cq_rule.py``'s, as for the recovery scan (``cq_dispatch``).

A fact is one tuple per put call, never one object per record of a batch:

* ``SingleFact``: ``(physical_offset, size, topic, queue_id, queue_offset, sys_flag, tags,
  properties, store_timestamp_ms)`` of one record;
* ``BatchFact``: the same fields as columns (ascending physical offsets), one store
  timestamp; ``tags`` ``None``: read TAGS from ``properties``; ``properties`` ``None``:
  every record's properties are only its TAGS and a UNIQ_KEY (``cq_rule.unit_tags_code``).
"""

from __future__ import annotations

import logging
import sys
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from itertools import compress, repeat
from typing import cast

from rmq_spark.store.cq_rule import SPECIAL_TOPICS, TagsCodes, dispatches, unit_tags_code

__all__ = ["BatchFact", "FactUnits", "PendingUnits", "Run", "SingleFact", "pack_units"]

SingleFact = tuple[int, int, str, int, int, int, str | None, str | None, int]
BatchFact = tuple[
    Sequence[int],
    Sequence[int],
    Sequence[str],
    Sequence[int],
    Sequence[int],
    Sequence[int],
    Sequence[str | None] | None,
    Sequence[str | None] | None,
    int,
]
Fact = SingleFact | BatchFact
Run = tuple[int, int, list[bytes]]
"""``(first queue offset, unit count, packed units)`` of consecutive units of one queue
(the units in pieces, to be joined once)."""

_LITTLE = sys.byteorder == "little"
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

    def drop_from(self, physical_offset: int) -> None:
        """Forget the facts of records at or past ``physical_offset`` (a write that failed
        and was undone)."""
        facts = self._facts
        while facts and _start(facts[-1]) >= physical_offset:
            facts.pop()

    def take(self, end: int) -> list[Fact]:
        """Remove and return the facts of records that start below ``end``."""
        facts = self._facts
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

    ts = fact[8]
    head = tuple(part(c, 0, cut) for c in fact[:8]) + (ts,)
    tail = tuple(part(c, cut, None) for c in fact[:8]) + (ts,)
    return cast("BatchFact", head), cast("BatchFact", tail)


def pack_units(offsets: Sequence[int], sizes: Sequence[int], codes: Sequence[int]) -> bytes:
    """The 20-byte units ``>qiq`` of these columns, back to back, laid out one byte column
    at a time (a few C calls for the whole run, no Python step per unit)."""
    n = len(offsets)
    parts = [array("q", offsets), array("i", sizes), array("q", codes)]
    out = bytearray(20 * n)
    at = 0
    for part in parts:
        if _LITTLE:
            part.byteswap()
        raw = part.tobytes()
        width = part.itemsize
        for j in range(width):
            out[at + j :: 20] = raw[j::width]
        at += width
    return bytes(out)


class FactUnits:
    """Builds each queue's units from facts (the dispatch thread's; keeps a TAGS cache)."""

    def __init__(self, delay_levels_ms: tuple[int, ...]) -> None:
        self._levels = delay_levels_ms
        self._codes = TagsCodes()

    def runs(self, facts: list[Fact], min_offset: int) -> dict[tuple[str, int], list[Run]]:
        """The units of ``facts``' records, per queue in queue offset order; records below
        ``min_offset`` (deleted by retention before they were dispatched) get none."""
        out: dict[tuple[str, int], list[Run]] = {}
        singles: list[SingleFact] = []
        for fact in facts:
            if type(fact[0]) is int:
                singles.append(fact)
                continue
            if singles:
                self._add(out, _columns_of(singles), min_offset)
                singles = []
            self._add(out, cast("BatchFact", fact), min_offset)
        if singles:
            self._add(out, _columns_of(singles), min_offset)
        return out

    def _add(self, out: dict[tuple[str, int], list[Run]], fact: BatchFact, low: int) -> None:
        offsets, sizes, topics, queue_ids, queue_offsets, sys_flags, tags, props, ts = fact
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
            n = len(offsets)
            if not n:
                return
        codes = self._tags_codes(topics, tags, props, ts, n)
        if topics.count(topics[0]) == n and queue_ids.count(queue_ids[0]) == n:
            _extend(out, (topics[0], queue_ids[0]), queue_offsets, offsets, sizes, codes)
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
                [sizes[i] for i in indexes], [codes[i] for i in indexes],
            )  # fmt: skip

    def _tags_codes(
        self,
        topics: Sequence[str],
        tags: Sequence[str | None] | None,
        props: Sequence[str | None] | None,
        ts: int | Sequence[int],
        n: int,
    ) -> list[int]:
        if props is None and tags is not None and SPECIAL_TOPICS.isdisjoint(topics):
            return self._codes.codes(tags)  # unit_tags_code's first branch, by column
        levels = self._levels
        return list(
            map(
                unit_tags_code, topics, repeat(None, n) if props is None else props,
                repeat(None, n) if tags is None else tags,
                repeat(ts, n) if type(ts) is int else cast("Sequence[int]", ts),
                repeat(levels, n),
            )
        )  # fmt: skip


def _columns_of(singles: list[SingleFact]) -> BatchFact:
    """Single-record facts as one batch (a transpose in C)."""
    columns = list(zip(*singles, strict=True))
    props = columns[7]
    return cast(
        "BatchFact",
        (*columns[:7], None if props.count(None) == len(props) else props, columns[8]),
    )


def _extend(
    out: dict[tuple[str, int], list[Run]],
    key: tuple[str, int],
    queue_offsets: Sequence[int],
    offsets: Sequence[int],
    sizes: Sequence[int],
    codes: Sequence[int],
) -> None:
    """Add one queue's units (ascending queue offsets) as runs of consecutive offsets."""
    runs = out.setdefault(key, [])
    n = len(queue_offsets)
    first = queue_offsets[0]
    if queue_offsets[-1] - first == n - 1:
        pieces = [(first, n, offsets, sizes, codes)]
    else:  # not consecutive (never from the appender): one run per unit
        pieces = [
            (queue_offsets[i], 1, offsets[i : i + 1], sizes[i : i + 1], codes[i : i + 1])
            for i in range(n)
        ]
    for start, count, run_offsets, run_sizes, run_codes in pieces:
        data = pack_units(run_offsets, run_sizes, run_codes)
        if runs and runs[-1][0] + runs[-1][1] == start:
            last = runs[-1]
            last[2].append(data)
            runs[-1] = (last[0], last[1] + count, last[2])
        else:
            runs.append((start, count, [data]))
