"""PURE: when a scheduled message falls due, and the record RocketMQ puts back for it.

Owns the decisions of ScheduleMessageService and the 5.x timer store (docs/DELAY.md) that do
not touch files, clocks or the network:

- which entries of one delay level may be redelivered now (``plan_level``): a contiguous run
  from the level's next queue offset, stopping at the first entry not yet due;
- which timer entries may be redelivered now (``plan_timer``), given the set of timer queue
  offsets already delivered (``QueueProgress``);
- the fingerprint that recognises a redelivered record in its real topic after a crash;
- lateness percentiles.

Does not own the restored record (``broker/schedule_records.py``), reading entries or
messages (``entries.py``, ``log_reader.py``), putting (``sink.py``), persisting progress
(``progress.py``) or the pass loop (``redeliver.py``).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from rmq_spark.store.codec import body_crc
from rmq_spark.store.layout import (
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
)
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.properties import (
    UNIQ_KEY,
    parse_properties,
)

__all__ = [
    "DueEntry",
    "LevelPlan",
    "QueueProgress",
    "SCHEDULE_TOPICS",
    "StopReason",
    "TIMER_QUEUE_ID",
    "fingerprint",
    "levels_by_queue",
    "percentile",
    "plan_level",
    "plan_timer",
]

TIMER_QUEUE_ID = 0
"""``rmq_sys_wheel_timer`` has a single queue (docs/DELAY.md)."""

SCHEDULE_TOPICS = (RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC)


@dataclass(frozen=True, slots=True)
class DueEntry:
    """One ConsumeQueue unit of ``SCHEDULE_TOPIC_XXXX`` or ``rmq_sys_wheel_timer``.

    ``due_ms`` is the unit's tagsCode: the delivery time fixed when the message was stored
    (delay level: store time + the level's delay then configured; timer: TIMER_OUT_MS).
    """

    queue_id: int
    queue_offset: int
    physical_offset: int
    total_size: int
    due_ms: int
    store_timestamp_ms: int = 0


class StopReason:
    """Why ``plan_level`` stopped where it did (plain strings, for logs and reports)."""

    NOT_DUE = "not_due"  # the next entry falls due later
    END = "end"  # no more entries known yet
    LIMIT = "limit"  # the batch is full
    GAP = "gap"  # the next queue offset is missing while later ones exist


@dataclass(frozen=True, slots=True)
class LevelPlan:
    """Entries of one delay level to redeliver now, in queue order, and where it stopped.

    ``next_due_ms`` is the due time of the entry that stopped the plan (``NOT_DUE`` only).
    """

    entries: tuple[DueEntry, ...]
    stop: str
    next_due_ms: int | None = None
    gap: tuple[int, int] | None = None  # GAP: the missing offsets [start, end)


def plan_level(
    entries: Sequence[DueEntry],
    progress: QueueProgress,
    now_ms: int,
    limit: int,
    skip: Collection[int] = (),
) -> LevelPlan:
    """The due run of one delay level, from its low water mark, in queue order.

    Offsets already done (``progress``) or in ``skip`` (blocked: their put failed and waits
    for a retry) are stepped over. Otherwise delivery is in queue order, as RocketMQ's
    per-level task: the first entry not yet due stops the level even if a later one is due
    (possible after the level's delay was shortened, or the clock stepped back); those later
    ones are late, never early. A missing offset followed by a present one stops it too
    (``GAP``; entries are indexed in log order, so the missing ones were lost: deleted by
    retention before delivery, as RocketMQ's offset correction assumes).

    Parameters
    ----------
    entries
        Units of the level in queue-offset order, as sources return them (ones already
        done are ignored).
    progress
        The level's progress.
    now_ms
        The current time.
    limit
        At most this many entries.
    skip
        Queue offsets to step over without taking them.

    Returns
    -------
    LevelPlan
    """
    assert limit > 0
    chosen: list[DueEntry] = []
    expected = progress.next_not_done(progress.low_water)
    # Start at the low water mark: a pass plans many batches from the same fetched rows.
    start = bisect.bisect_left(entries, expected, key=lambda e: e.queue_offset)
    previous = -1
    for entry in itertools.islice(entries, start, None):
        assert entry.queue_offset >= previous, "entries must be in queue-offset order"
        previous = entry.queue_offset
        while entry.queue_offset > expected and expected in skip:
            expected = progress.next_not_done(expected + 1)
        if entry.queue_offset < expected or progress.is_done(entry.queue_offset):
            continue
        if entry.queue_offset > expected:
            return LevelPlan(tuple(chosen), StopReason.GAP, gap=(expected, entry.queue_offset))
        if entry.queue_offset in skip:
            expected = progress.next_not_done(expected + 1)
            continue
        if len(chosen) >= limit:
            return LevelPlan(tuple(chosen), StopReason.LIMIT)
        if entry.due_ms > now_ms:
            return LevelPlan(tuple(chosen), StopReason.NOT_DUE, entry.due_ms)
        chosen.append(entry)
        expected = progress.next_not_done(expected + 1)
    return LevelPlan(tuple(chosen), StopReason.END)


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """Which queue offsets of the timer queue were delivered.

    Timer messages fall due in any order, and a delay level can have a blocked entry (its put
    keeps failing) with later ones delivered, so one offset cannot say what is done.
    Everything below ``low_water`` is done; above it, ``done_ranges`` lists half-open
    ``[start, end)`` runs of delivered offsets, sorted and disjoint. ``mark`` keeps it
    compact. For a delay level ``low_water`` is RocketMQ's offsetTable value.
    """

    low_water: int = 0
    done_ranges: tuple[tuple[int, int], ...] = ()
    _starts: tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_starts", tuple(start for start, _ in self.done_ranges))

    def is_done(self, queue_offset: int) -> bool:
        if queue_offset < self.low_water:
            return True
        if not self._starts:
            return False
        index = bisect.bisect_right(self._starts, queue_offset) - 1
        return index >= 0 and queue_offset < self.done_ranges[index][1]

    def next_not_done(self, queue_offset: int) -> int:
        """The smallest offset ``>= queue_offset`` that is not done."""
        queue_offset = max(queue_offset, self.low_water)
        index = bisect.bisect_right(self._starts, queue_offset) - 1
        if index >= 0 and queue_offset < self.done_ranges[index][1]:
            return self.done_ranges[index][1]
        return queue_offset

    def mark(self, queue_offsets: Iterable[int]) -> QueueProgress:
        """A copy with ``queue_offsets`` done as well."""
        points = sorted({q for q in queue_offsets if q >= self.low_water})
        ranges = list(self.done_ranges) + [(q, q + 1) for q in points]
        ranges.sort()
        merged: list[tuple[int, int]] = []
        for start, end in ranges:
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        low_water = self.low_water
        if merged and merged[0][0] <= low_water:
            low_water = max(low_water, merged.pop(0)[1])
        return QueueProgress(low_water, tuple(merged))

    def raise_low_water(self, queue_offset: int) -> QueueProgress:
        """A copy with every offset below ``queue_offset`` done."""
        if queue_offset <= self.low_water:
            return self
        ranges = [(max(a, queue_offset), b) for a, b in self.done_ranges if b > queue_offset]
        low_water = queue_offset
        if ranges and ranges[0][0] <= low_water:
            low_water = ranges.pop(0)[1]
        return QueueProgress(low_water, tuple(ranges))

    @property
    def done_count_above_low_water(self) -> int:
        return sum(end - start for start, end in self.done_ranges)


def plan_timer(
    entries: Iterable[DueEntry],
    progress: QueueProgress,
    now_ms: int,
    limit: int,
    skip: Collection[int] = (),
) -> tuple[DueEntry, ...]:
    """Timer entries due by ``now_ms``, not done and not in ``skip``: earliest due first,
    then queue order; at most ``limit``."""
    assert limit > 0
    due = [
        e
        for e in entries
        if e.due_ms <= now_ms
        and not progress.is_done(e.queue_offset)
        and e.queue_offset not in skip
    ]
    due.sort(key=lambda e: (e.due_ms, e.queue_offset))
    unique: dict[int, DueEntry] = {}
    for entry in due:
        unique.setdefault(entry.queue_offset, entry)
        if len(unique) >= limit:
            break
    return tuple(unique.values())


def fingerprint(
    record: MessageRecord, *, exact: bool = True, message_id: str | None = None
) -> tuple[object, ...]:
    """What identifies a restored record once stored in its real topic.

    ``exact`` (in-process puts): every field the restore copies plus the properties string,
    so a copy of one schedule record never matches another one (a consumer retry of the same
    message carries the same UNIQ_KEY, but a different RECONSUMETIMES and DELAY).
    Not ``exact`` (puts over gRPC, where the broker rebuilds properties, picks the queue and
    stamps its own born time): topic, UNIQ_KEY (``message_id`` when the record has none) and
    BODYCRC.
    """
    crc = record.body_crc if record.body_crc is not None else body_crc(record.body)
    if exact:
        return (
            record.topic,
            record.queue_id,
            record.properties,
            crc,
            record.flag,
            record.born_timestamp_ms,
            record.reconsume_times,
        )
    uniq = parse_properties(record.properties).get(UNIQ_KEY) or message_id
    return (record.topic, uniq, crc)


def percentile(values: Sequence[int | float], fraction: float) -> float | None:
    """Nearest-rank percentile (``fraction`` in [0, 1]); ``None`` for no values.

    Examples
    --------
    >>> percentile([5, 1, 3], 0.5)
    3.0
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = min(max(1, math.ceil(fraction * len(ordered))), len(ordered))
    return float(ordered[rank - 1])


def levels_by_queue(levels: dict[int, QueueProgress]) -> dict[int, QueueProgress]:
    """Level progress keyed by schedule queue id (level - 1)."""
    return {level - 1: progress for level, progress in levels.items()}
