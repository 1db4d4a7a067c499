"""PURE: the record RocketMQ puts back into the real topic for a due schedule record.

The two system topics that hold scheduled messages, ``SCHEDULE_TOPIC_XXXX`` (delay levels) and
``rmq_sys_wheel_timer`` (5.x timer), keep the real topic and queue in REAL_TOPIC / REAL_QID.
This module turns such a record back into the message to store (``restore_delayed``:
ScheduleMessageService's messageTimeup; ``restore_timer``: the timer store's convert) or a
``Discard`` with its reason, and says when a timer record is due (``timer_due_ms``); the
byte-level rules are in docs/DELAY.md.

Below both users: the broker (``redelivery.py``: a redelivery request over gRPC names a
schedule record, the broker restores it) and the redelivery job (``rmq_spark/delay``). Does not
own what is due when (``delay/schedule.py``) nor putting (``delay/sink.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from rmq_spark.store.layout import RMQ_SYS_TRANS_HALF_TOPIC
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
    "TimerRestore",
    "property_value",
    "restore_delayed",
    "restore_timer",
    "restore_timer_template",
    "target_delete_key",
    "timer_due_ms",
]

DELETE_MARKER_PREFIX = "timer delete marker for "
"""Reason of the ``Discard`` of a timer delete marker; the cancelled key follows it."""


_JAVA_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)

# Java HashMap(128): 5.x string2messageProperties builds the map the timer store edits.
_JAVA_5X_PROPERTY_MAP_CAPACITY = 128
_DEQUEUE_PLACEHOLDER = "\x00dequeue\x00"  # never a stored value (a placeholder, replaced)


@dataclass(frozen=True, slots=True)
class Discard:
    """A due entry that is not put back anywhere, and why (it still counts as done)."""

    reason: str


def restore_delayed(
    record: MessageRecord, properties: Mapping[str, str] | None = None
) -> MessageRecord | Discard:
    """The record ``messageTimeup`` puts into the real topic for a delay-level message.

    Body, flag, sysflag, born time and host, store host and RECONSUMETIMES are copied; topic
    and queue id come from REAL_TOPIC/REAL_QID; PREPAREDTRANSACTIONOFFSET is 0. The properties
    *string* is kept verbatim (Java computes it before editing the map), so DELAY, REAL_TOPIC
    and REAL_QID stay on disk (docs/DELAY.md). A half-topic message is discarded as RocketMQ does.

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
    so REAL_*, TIMER_OUT_MS and TIMER_DELIVER_MS stay on disk (docs/DELAY.md). A delete marker
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
