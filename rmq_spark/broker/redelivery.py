"""Redelivery over gRPC: a request that *names* a schedule record, and the broker's answer.

Owns the one shape a redelivery takes on the wire and on both ends of it, so that a message
redelivered through a broker (``--broker``) is stored exactly as the in-process job stores it:

- ``redelivery_put_request``: the ``PutRequest`` for a restored record (properties string
  verbatim, queue id, flag, sysflag, born time and host, RECONSUMETIMES), used by the
  in-process sink and by the broker alike;
- ``RedeliveryRef`` and its protobuf form (``ref_to_message`` / ``ref_from_message``): a
  message of a ``StoreService.Redeliver`` call (its own RPC, ``store_rpc.py``; never
  SendMessage) whose topic is the schedule record's own system topic (``SCHEDULE_TOPIC_XXXX``
  or ``rmq_sys_wheel_timer``) and whose ``receipt_handle`` is
  ``rmq-spark-redeliver:<physical offset>`` carries *where* the record is, never what to
  store (see docs/DELAY.md, "Redelivery through a broker");
- ``resolve_redelivery``: the broker's side: read the named record from its own store, check
  it is the schedule record named and that it is due, and restore it with the same
  ``schedule_records.restore_delayed`` / ``restore_timer`` the job uses.

The redelivery job (``rmq_spark/delay``) is a client of this protocol: it sits above the
broker and imports from here, never the other way round.

An ordinary client cannot use it to bypass topic rules: sends to those system topics are
refused (ILLEGAL_TOPIC), and a redelivery request stores nothing it brings along: topic,
queue, body and properties come from a schedule record already in the store (whose
REAL_TOPIC the broker or store set when it was enqueued), and only once it is due.

Only the schedule job may ask: the request must be signed by the store's own identity
(``auth.STORE_ACCESS_KEY``, whose secret is in ``<store>/config/``) or, with auth on, by a user
with the ``Redeliver`` right (``store_gate.py`` checks it before the request reaches the
service). Every refusal is the same reply (``REDELIVERY_REFUSED``), and a second request for
one schedule record returns the first copy's position (``redelivery_journal.py``).

Does not own the RPC (``broker/grpc/store_rpc.py``) nor the put (``broker/service.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rmq_spark.broker.schedule_records import (
    Discard,
    property_value,
    restore_delayed,
    restore_timer,
    timer_due_ms,
)
from rmq_spark.errors import RmqError
from rmq_spark.store.delay_levels import parse_message_delay_level
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.properties import UNIQ_KEY, parse_properties
from rmq_spark.store.put import PutRequest

if TYPE_CHECKING:
    from rmq_spark.broker.store_port import BrokerStore

__all__ = [
    "NotDue",
    "REDELIVERY_HANDLE_PREFIX",
    "REDELIVERY_REFUSED",
    "REDELIVERY_TOPICS",
    "RedeliveryRef",
    "redelivery_put_request",
    "ref_from_message",
    "ref_to_message",
    "resolve_redelivery",
]

REDELIVERY_TOPICS = frozenset({RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC})
"""The topics a redelivery request names (sends to them are illegal)."""

REDELIVERY_HANDLE_PREFIX = "rmq-spark-redeliver:"
"""``system_properties.receipt_handle`` of a redelivery request: prefix + physical offset."""

REDELIVERY_REFUSED = "redelivery refused"
"""The status message of every refused redelivery request (``BAD_REQUEST``), whatever the
reason (not allowed, no such record, not a schedule record, not due): a refusal tells the
caller nothing about the store. The broker logs the reason."""


@dataclass(frozen=True, slots=True)
class RedeliveryRef:
    """A schedule record to redeliver, by where it is.

    ``dequeue_ms`` is the job's dequeue time (TIMER_DEQUEUE_MS of a timer message; kept in
    the job's intent so a retried put builds the same bytes). ``message_id`` is echoed.
    """

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    dequeue_ms: int
    message_id: str


@dataclass(frozen=True, slots=True)
class NotDue:
    """The named record is not due yet by the broker's clock."""

    due_ms: int


def redelivery_put_request(record: MessageRecord) -> PutRequest:
    """The put of a restored record: everything copied, the properties string verbatim.

    Not ``idempotent``: every consumer retry of one message carries the same UNIQ_KEY, so the
    store's (topic, UNIQ_KEY) window would drop a legitimate second redelivery; the job's
    intent journal makes redelivery exactly once instead (docs/DELAY.md).
    """
    return PutRequest(
        topic=record.topic,
        body=record.body,
        queue_id=record.queue_id,
        flag=record.flag,
        sys_flag=record.sys_flag,
        born_timestamp_ms=record.born_timestamp_ms,
        born_host=record.born_host,
        reconsume_times=record.reconsume_times,
        prepared_transaction_offset=0,
        raw_properties=record.properties,
        idempotent=False,
    )


def ref_to_message(ref: RedeliveryRef) -> Any:
    """The ``Message`` of a redelivery request (no body: the broker reads the record)."""
    from rmq_spark.broker.proto import definition_pb2 as pb

    message = pb.Message()
    message.topic.name = ref.topic
    props = message.system_properties
    props.message_id = ref.message_id
    props.body_encoding = pb.IDENTITY
    props.message_type = pb.NORMAL
    props.queue_id = ref.queue_id
    props.queue_offset = ref.queue_offset
    props.receipt_handle = f"{REDELIVERY_HANDLE_PREFIX}{ref.physical_offset}"
    props.delivery_timestamp.FromMilliseconds(ref.dequeue_ms)
    return message


def ref_from_message(message: Any) -> RedeliveryRef | str:
    """The ``RedeliveryRef`` of a redelivery request, or what is wrong with it."""
    props = message.system_properties
    handle = props.receipt_handle if props.HasField("receipt_handle") else ""
    offset_text = handle.removeprefix(REDELIVERY_HANDLE_PREFIX)
    if (
        not handle.startswith(REDELIVERY_HANDLE_PREFIX)
        or not offset_text.isascii()
        or not offset_text.isdigit()
    ):
        return (
            f"a redelivery request needs receipt_handle "
            f"'{REDELIVERY_HANDLE_PREFIX}<physical offset>', got {handle!r}"
        )
    if message.topic.name not in REDELIVERY_TOPICS or message.topic.resource_namespace:
        return f"{message.topic.name!r} is no schedule topic"
    if not props.HasField("queue_offset") or not props.HasField("delivery_timestamp"):
        return "a redelivery request needs queue_offset and delivery_timestamp (dequeue time)"
    if message.body:
        return "a redelivery request carries no body (the broker reads the schedule record)"
    return RedeliveryRef(
        topic=message.topic.name,
        queue_id=props.queue_id,
        queue_offset=props.queue_offset,
        physical_offset=int(offset_text),
        dequeue_ms=props.delivery_timestamp.ToMilliseconds(),
        message_id=props.message_id,
    )


def resolve_redelivery(
    store: BrokerStore, ref: RedeliveryRef, now_ms: int
) -> PutRequest | NotDue | str:
    """The broker's side: the put for ``ref``, ``NotDue``, or why it is refused.

    Parameters
    ----------
    store
        The broker's open ``MessageStore`` (``read``, ``config.message_delay_level``).
    ref
        The request.
    now_ms
        The broker's clock: a record is redelivered only once due by it (delay level: its
        store time + the level's delay as configured now; timer: ``timer_due_ms``).
    """
    try:
        record = store.read(ref.physical_offset)
    except RmqError as err:
        return f"no schedule record at physical offset {ref.physical_offset}: {err}"
    named = (ref.topic, ref.queue_id, ref.queue_offset)
    if (record.topic, record.queue_id, record.queue_offset) != named:
        return (
            f"physical offset {ref.physical_offset} holds {record.topic}/{record.queue_id}"
            f"@{record.queue_offset}, not {ref.topic}/{ref.queue_id}@{ref.queue_offset}"
        )
    if record.topic == RMQ_SYS_SCHEDULE_TOPIC:
        levels_ms = parse_message_delay_level(store.config.message_delay_level)
        level = record.queue_id + 1
        if not 1 <= level <= len(levels_ms):
            return f"{RMQ_SYS_SCHEDULE_TOPIC} queue {record.queue_id} is no configured level"
        due_ms = record.store_timestamp_ms + levels_ms[level - 1]
        restored = restore_delayed(record)
    else:
        properties = parse_properties(record.properties)
        due_ms = timer_due_ms(properties, record.store_timestamp_ms)
        restored = restore_timer(
            record,
            enqueue_ms=record.store_timestamp_ms,
            dequeue_ms=ref.dequeue_ms,
            properties=properties,
        )
    if now_ms < due_ms:
        return NotDue(due_ms)
    if isinstance(restored, Discard):
        return f"the record is not redelivered: {restored.reason}"
    uniq = property_value(record.properties, UNIQ_KEY)
    if uniq and ref.message_id and ref.message_id != uniq:
        return f"message id {ref.message_id!r} is not the record's UNIQ_KEY {uniq!r}"
    return redelivery_put_request(restored)
