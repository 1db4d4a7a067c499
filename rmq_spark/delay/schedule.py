"""PURE: when a scheduled message falls due, and the record RocketMQ puts back for it.

Owns the decisions of ScheduleMessageService and the 5.x timer store (spec STORE_FORMAT.md
9.1-9.6) that do not touch files, clocks or the network:

- which entries of one delay level may be redelivered now (``plan_level``): a contiguous run
  from the level's next queue offset, stopping at the first entry not yet due;
- which timer entries may be redelivered now (``plan_timer``), given the set of timer queue
  offsets already delivered (``QueueProgress``);
- the restored record (``restore_delayed``: messageTimeup, ``restore_timer``: the timer
  store's convert), or a ``Discard`` with its reason;
- the fingerprint that recognises a redelivered record in its real topic after a crash;
- lateness percentiles.

Does not own reading entries or messages (``entries.py``, ``log_reader.py``), putting
(``sink.py``), persisting progress (``progress.py``) or the pass loop (``redeliver.py``).
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rmq_spark.store.codec import body_crc
from rmq_spark.store.layout import (
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
)
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    REAL_QID,
    REAL_TOPIC,
    TIMER_DEL_UNIQKEY,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TIMER_DEQUEUE_MS,
    TIMER_ENQUEUE_MS,
    TIMER_OUT_MS,
    UNIQ_KEY,
    encode_properties,
    java_hashmap_order,
    parse_properties,
)

__all__ = [
    "DELETE_MARKER_PREFIX",
    "Discard",
    "DueEntry",
    "LevelPlan",
    "QueueProgress",
    "SCHEDULE_TOPICS",
    "StopReason",
    "TIMER_QUEUE_ID",
    "TimerRestore",
    "fingerprint",
    "percentile",
    "plan_level",
    "plan_timer",
    "property_value",
    "restore_delayed",
    "restore_timer",
    "restore_timer_template",
    "target_delete_key",
    "timer_due_ms",
]

DELETE_MARKER_PREFIX = "timer delete marker for "
"""Reason of the ``Discard`` of a timer delete marker; the cancelled key follows it."""

TIMER_QUEUE_ID = 0
"""``rmq_sys_wheel_timer`` has a single queue (spec 9.6)."""

SCHEDULE_TOPICS = (RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC)

_JAVA_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)

# Java HashMap(128): 5.x string2messageProperties builds the map the timer store edits.
_JAVA_5X_PROPERTY_MAP_CAPACITY = 128
_DEQUEUE_PLACEHOLDER = "\x00dequeue\x00"  # never a stored value (a placeholder, replaced)


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


@dataclass(frozen=True, slots=True)
class Discard:
    """A due entry that is not put back anywhere, and why (it still counts as done)."""

    reason: str


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


def restore_delayed(
    record: MessageRecord, properties: Mapping[str, str] | None = None
) -> MessageRecord | Discard:
    """The record ``messageTimeup`` puts into the real topic for a delay-level message.

    Body, flag, sysflag, born time and host, store host and RECONSUMETIMES are copied; topic
    and queue id come from REAL_TOPIC/REAL_QID; PREPAREDTRANSACTIONOFFSET is 0. The properties
    *string* is kept verbatim (Java computes it before editing the map), so DELAY, REAL_TOPIC
    and REAL_QID stay on disk (spec 9.3). A half-topic message is discarded as RocketMQ does.

    ``properties`` is ``parse_properties(record.properties)`` when the caller has it.

    Returns
    -------
    MessageRecord
        Offsets and store time are 0: the store fills them in.
    Discard
        No or a bad REAL_TOPIC / REAL_QID, or the real topic is the transaction half topic.
    """
    if properties is None:
        text = record.properties
        properties = {
            key: value
            for key in (REAL_TOPIC, REAL_QID)
            if (value := property_value(text, key)) is not None
        }
    target = _real_target(properties)
    if isinstance(target, Discard):
        return target
    topic, queue_id = target
    return _copy(record, topic, queue_id, record.properties)


@dataclass(frozen=True, slots=True)
class TimerRestore:
    """A timer message's restored record, all but TIMER_DEQUEUE_MS (known at delivery only).

    ``build(dequeue_ms)`` is cheap (two string joins), so the job restores timer messages
    before they fall due and only fills in the dequeue time when it puts them.
    """

    record: MessageRecord
    head: str  # the properties string up to the TIMER_DEQUEUE_MS value
    tail: str  # and after it

    def build(self, dequeue_ms: int) -> MessageRecord:
        return _copy(
            self.record,
            self.record.topic,
            self.record.queue_id,
            self.head + str(dequeue_ms) + self.tail,
        )


def restore_timer(
    record: MessageRecord,
    *,
    enqueue_ms: int,
    dequeue_ms: int,
    properties: Mapping[str, str] | None = None,
) -> MessageRecord | Discard:
    """The record the 5.x timer store puts into the real topic when a timer message is due.

    TIMER_ENQUEUE_MS and TIMER_DEQUEUE_MS are added to the property map and the string is
    rebuilt (Java HashMap(128) order) *before* REAL_TOPIC/REAL_QID are removed from the map,
    so REAL_*, TIMER_OUT_MS and TIMER_DELIVER_MS stay on disk (spec 9.6). A delete marker
    (TIMER_DEL_UNIQKEY) is never delivered.

    Parameters
    ----------
    record
        The ``rmq_sys_wheel_timer`` record.
    enqueue_ms
        When the timer store took the message (we use the timer record's store time).
    dequeue_ms
        When it is taken out for delivery (the pass's time; recorded in the intent so that a
        retried put after a crash builds the same bytes).
    """
    template = restore_timer_template(record, enqueue_ms=enqueue_ms, properties=properties)
    return template if isinstance(template, Discard) else template.build(dequeue_ms)


def restore_timer_template(
    record: MessageRecord, *, enqueue_ms: int, properties: Mapping[str, str] | None = None
) -> TimerRestore | Discard:
    """``restore_timer`` without the dequeue time: ``.build(dequeue_ms)`` finishes it."""
    if properties is None:
        properties = parse_properties(record.properties)
    if TIMER_DEL_UNIQKEY in properties:
        return Discard(DELETE_MARKER_PREFIX + properties[TIMER_DEL_UNIQKEY])
    target = _real_target(properties)
    if isinstance(target, Discard):
        return target
    topic, queue_id = target
    keys = list(properties) + [TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS]
    updated = dict(properties)
    updated[TIMER_ENQUEUE_MS] = str(enqueue_ms)
    updated[TIMER_DEQUEUE_MS] = _DEQUEUE_PLACEHOLDER
    ordered = java_hashmap_order(keys, _JAVA_5X_PROPERTY_MAP_CAPACITY)
    text = encode_properties(
        {key: updated[key] for key in ordered},
        trailing_separator=record.properties.endswith(PROPERTY_SEPARATOR),
    )
    # Keys are unique and a value never holds \x02: the pair starts the string or follows
    # a separator, exactly once.
    marker = TIMER_DEQUEUE_MS + NAME_VALUE_SEPARATOR
    at = 0 if text.startswith(marker + _DEQUEUE_PLACEHOLDER) else -1
    if at < 0:
        at = text.index(PROPERTY_SEPARATOR + marker + _DEQUEUE_PLACEHOLDER) + 1
    value_at = at + len(marker)
    return TimerRestore(
        _copy(record, topic, queue_id, ""),
        text[:value_at],
        text[value_at + len(_DEQUEUE_PLACEHOLDER) :],
    )


def timer_due_ms(properties: Mapping[str, str], store_timestamp_ms: int) -> int:
    """When a timer message may be delivered: never before the time its client asked for.

    RocketMQ's wheel fires at TIMER_OUT_MS, rounded *down* to the wheel precision, so it can
    deliver up to one precision step early. We take the latest of TIMER_OUT_MS,
    TIMER_DELIVER_MS and store time + TIMER_DELAY_MS / TIMER_DELAY_SEC (those present);
    the store time when none is (a malformed timer record is delivered at once).
    """
    candidates = [store_timestamp_ms]
    for key, scale_ms, relative in (
        (TIMER_OUT_MS, 1, False),
        (TIMER_DELIVER_MS, 1, False),
        (TIMER_DELAY_MS, 1, True),
        (TIMER_DELAY_SEC, 1000, True),
    ):
        value = _as_int(properties.get(key))
        if value is not None:
            candidates.append(value * scale_ms + (store_timestamp_ms if relative else 0))
    return max(candidates)


def target_delete_key(record: MessageRecord) -> str | None:
    """``REAL_TOPIC+UNIQ_KEY``: the key a timer delete marker names to cancel this message
    (RocketMQ ``buildDeleteKey``); works on the timer record and on the restored one."""
    properties = parse_properties(record.properties)
    topic, uniq = properties.get(REAL_TOPIC), properties.get(UNIQ_KEY)
    return f"{topic}+{uniq}" if topic and uniq else None


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


def property_value(text: str, key: str) -> str | None:
    """One property of a stored properties string without parsing all of it.

    Same result as ``parse_properties(text).get(key)`` (later duplicates win, empty values
    count as absent), several times faster for a key near the front.
    """
    marker = key + NAME_VALUE_SEPARATOR
    found: str | None = None
    start = 0
    while True:
        at = text.find(marker, start)
        if at < 0:
            return found or None
        if at == 0 or text[at - 1] == PROPERTY_SEPARATOR:
            end = text.find(PROPERTY_SEPARATOR, at)
            value = text[at + len(marker) : end if end >= 0 else len(text)]
            found = value or found  # the parser drops an empty value: an earlier one stays
            if end < 0:
                return found or None
            start = end
        else:
            start = at + 1


def _real_target(properties: Mapping[str, str]) -> tuple[str, int] | Discard:
    topic = properties.get(REAL_TOPIC)
    if not topic:
        return Discard("no REAL_TOPIC property")
    if topic == RMQ_SYS_TRANS_HALF_TOPIC:
        return Discard(f"real topic is {RMQ_SYS_TRANS_HALF_TOPIC} (RocketMQ logs [BUG])")
    queue_id = _as_int(properties.get(REAL_QID))
    if queue_id is None or queue_id < 0:
        return Discard(f"bad REAL_QID {properties.get(REAL_QID)!r}")
    return topic, queue_id


def _copy(record: MessageRecord, topic: str, queue_id: int, properties: str) -> MessageRecord:
    # Positional construction: ~3x faster than dataclasses.replace on the hot path.
    return MessageRecord(
        topic,
        record.body,
        properties,
        queue_id,
        record.flag,
        0,  # queue_offset: the store assigns it
        0,  # physical_offset: the store assigns it
        record.sys_flag,
        record.born_timestamp_ms,
        record.born_host,
        0,  # store_timestamp_ms: the store stamps it
        record.store_host,
        record.reconsume_times,
        0,  # prepared_transaction_offset
        record.body_crc,
    )


def _as_int(text: str | None) -> int | None:
    """A decimal int as Java's ``Long.parseLong`` reads it (sign allowed), else ``None``."""
    if text is None or not _JAVA_INT.fullmatch(text):
        return None
    return int(text)
