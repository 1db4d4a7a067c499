"""What a redelivery batch is made of: each entry's message read, restored and ready to put.

Owns ``load_entry`` (a schedule record read from the log -> ``Loaded``: the restored record,
or a timer message's ``TimerRestore`` still missing its dequeue time, its due time and
message id, and the put request when final), ``Item`` (a ``Loaded`` finished at put time),
the cancellation of timer messages by a delete marker in the same batch, and the broker
reference of an item (``broker.redelivery.RedeliveryRef``). No IO: the records are read by
the caller.

Does not own reading (``log_reader.py``), planning or the exactly-once protocol
(``redeliver.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rmq_spark.broker.consumer.revive import is_retry_schedule_record
from rmq_spark.broker.redelivery import RedeliveryRef, redelivery_put_request
from rmq_spark.broker.schedule_records import (
    DELETE_MARKER_PREFIX,
    Discard,
    TimerRestore,
    property_value,
    restore_delayed,
    restore_timer_template,
    target_delete_key,
    timer_due_ms,
)
from rmq_spark.delay.offsets import IntentEntry
from rmq_spark.delay.sink import fallback_message_id
from rmq_spark.errors import EntryMismatchError
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.properties import UNIQ_KEY, parse_properties
from rmq_spark.store.put import PutRequest

__all__ = [
    "Item",
    "LEVEL",
    "Loaded",
    "TIMER",
    "apply_cancellations",
    "entry_key",
    "finish",
    "load_entry",
    "reference",
]

LEVEL, TIMER = "level", "timer"


@dataclass(frozen=True, slots=True)
class Loaded:
    """An entry's message read and restored but for the dequeue time (``TimerRestore``):
    what a pass prepares before the entry falls due."""

    physical_offset: int
    restored: MessageRecord | TimerRestore | Discard
    due_ms: int
    message_id: str
    request: PutRequest | None = None  # the put of a final record (not a timer template)


@dataclass
class Item:
    """One intent entry, read and restored."""

    intent: IntentEntry
    restored: MessageRecord | Discard
    due_ms: int
    message_id: str
    dequeue_ms: int = 0
    request: PutRequest | None = None  # the put, when prepared ahead


def entry_key(item: IntentEntry) -> tuple[str, int, int]:
    """(kind, queue id, queue offset): an entry's key among the prepared ones."""
    return (item.kind, item.entry.queue_id, item.entry.queue_offset)


def load_entry(intent: IntentEntry, record: MessageRecord | Exception) -> Loaded:
    """Restore the schedule record of ``intent`` (an exception: it is gone from the log).

    Raises
    ------
    EntryMismatchError
        The record is not the schedule record the entry names.
    """
    entry = intent.entry
    if isinstance(record, Exception):
        gone = Discard("message no longer in the CommitLog (deleted by retention)")
        return Loaded(entry.physical_offset, gone, entry.due_ms, "")
    topic = RMQ_SYS_SCHEDULE_TOPIC if intent.kind == LEVEL else RMQ_SYS_WHEEL_TIMER_TOPIC
    if (record.topic, record.queue_id, record.queue_offset) != (
        topic,
        entry.queue_id,
        entry.queue_offset,
    ):
        raise EntryMismatchError(
            f"entry {topic}/{entry.queue_id}@{entry.queue_offset} points at physical "
            f"offset {entry.physical_offset}, which holds "
            f"{record.topic}/{record.queue_id}@{record.queue_offset}"
        )
    if intent.kind == LEVEL:
        uniq = property_value(record.properties, UNIQ_KEY)
        message_id = uniq or fallback_message_id(entry.physical_offset)
        restored = restore_delayed(record)
        if is_retry_schedule_record(record.properties):  # the broker's RetryReviver's
            restored = Discard("a consumer retry copy: the broker puts it back")
        request = None
        if isinstance(restored, MessageRecord):
            request = redelivery_put_request(restored)
        return Loaded(entry.physical_offset, restored, entry.due_ms, message_id, request)
    properties = parse_properties(record.properties)
    message_id = properties.get(UNIQ_KEY) or fallback_message_id(entry.physical_offset)
    due_ms = max(entry.due_ms, timer_due_ms(properties, record.store_timestamp_ms))
    template = restore_timer_template(
        record, enqueue_ms=record.store_timestamp_ms, properties=properties
    )
    return Loaded(entry.physical_offset, template, due_ms, message_id)


def finish(intent: IntentEntry, loaded: Loaded, dequeue_ms: int) -> Item:
    """The item put for ``intent`` when taken out at ``dequeue_ms``."""
    restored = loaded.restored
    if isinstance(restored, TimerRestore):
        restored = restored.build(dequeue_ms)
    return Item(intent, restored, loaded.due_ms, loaded.message_id, dequeue_ms, loaded.request)


def reference(item: Item) -> RedeliveryRef:
    """How a broker finds the item's schedule record (``GrpcSink``)."""
    entry = item.intent.entry
    topic = RMQ_SYS_SCHEDULE_TOPIC if item.intent.kind == LEVEL else RMQ_SYS_WHEEL_TIMER_TOPIC
    return RedeliveryRef(
        topic,
        entry.queue_id,
        entry.queue_offset,
        entry.physical_offset,
        item.dequeue_ms,
        item.message_id,
    )


def apply_cancellations(items: list[Item]) -> None:
    """Timer messages whose delete marker is in the same batch are not delivered."""
    markers = {
        item.restored.reason.removeprefix(DELETE_MARKER_PREFIX)
        for item in items
        if isinstance(item.restored, Discard)
        and item.restored.reason.startswith(DELETE_MARKER_PREFIX)
    }
    if not markers:
        return
    for item in items:
        if isinstance(item.restored, MessageRecord) and item.intent.kind == TIMER:
            key = target_delete_key(item.restored)
            if key in markers:
                item.restored = Discard(f"cancelled by a timer delete marker ({key})")
