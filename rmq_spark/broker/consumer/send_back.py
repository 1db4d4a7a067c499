"""Send-back: who may have a record copied into a group's retry topic, and which record.

RocketMQ's ``CONSUMER_SEND_MSG_BACK``: a consumer group failed a message, so the broker stores
its retry copy (``%RETRY%<group>``, delayed) or, out of attempts, its dead letter
(``%DLQ%<group>``), built by ``copies.send_back_request``. A send-back copies a record that
is already in the store, so it must never become a way to read a record the caller was not
given. Two ways to name the record:

- ``by_receipt``: a receipt handle the broker issued to the group for that delivery, still
  current (not acknowledged, not redelivered since), whose record is the one delivered. The
  delivery is acknowledged once the copy is stored (the copy replaces it), so one delivery
  is sent back at most once. Any caller holding the receipt may (as it may Ack it); with auth
  on the gate also wants ``Sub`` on the group and on the topic the record was delivered as.
- ``by_offset``: a CommitLog offset, for the store's own identity only (the Spark retry
  helper reads segments, so it holds no receipt; the gate, ``store_gate.py``, checks the
  signature). The record must be one a group consumes: a user topic, the group's own
  ``%RETRY%`` copy, or a dead letter.

Every refusal is a ``Refused`` whose reason is logged, never sent: the caller sees one text
(``SEND_BACK_REFUSED``) whatever went wrong. Knows nothing of protobuf.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from rmq_spark.broker.consumer.copies import send_back_request
from rmq_spark.broker.consumer.groups import ConsumerGroups, retry_topic
from rmq_spark.broker.consumer.receipt import decode_receipt_handle
from rmq_spark.broker.schedule_records import property_value
from rmq_spark.broker.topics import topic_name_problem
from rmq_spark.errors import RmqError
from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.properties import RETRY_TOPIC
from rmq_spark.store.put import PutRequest, PutResult

__all__ = [
    "ByOffset",
    "ByPulled",
    "ByReceipt",
    "Refused",
    "SEND_BACK_REFUSED",
    "SendBackPort",
    "SendBackRecord",
    "by_offset",
    "by_pulled",
    "by_receipt",
    "send_back",
]

log = logging.getLogger("rmq_spark.broker")

SEND_BACK_REFUSED = "send-back refused"
"""The status message of every refused send-back, whatever the reason (not allowed, stale or
forged receipt, no such record, a record no group consumes)."""


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str  # for the broker's log only


@dataclass(frozen=True, slots=True)
class ByOffset:
    """The record at a CommitLog offset (the store identity's way)."""

    physical_offset: int


@dataclass(frozen=True, slots=True)
class ByReceipt:
    """The record delivered to the group as ``topic`` (stored name) under ``receipt_handle``."""

    topic: str
    receipt_handle: str


@dataclass(frozen=True, slots=True)
class ByPulled:
    """The record at a CommitLog offset that a 4.x consumer pulled as ``topic`` (remoting
    ``CONSUMER_SEND_MSG_BACK``; the gate checked ``Sub`` on ``topic`` and the group), with
    the consumer's delay level (0: the default) and retry limit (None: the group's)."""

    physical_offset: int
    topic: str
    delay_level: int = 0
    max_reconsume: int | None = None


SendBackRecord = ByOffset | ByReceipt | ByPulled


class SendBackPort(Protocol):
    """What a send-back needs of the consume service (``ConsumeService``)."""

    groups: ConsumerGroups

    def read_record(self, physical_offset: int) -> DecodedRecord: ...
    def max_reconsume(self, group: str) -> int: ...
    def put_send_back(self, request: PutRequest) -> PutResult: ...


def send_back(service: SendBackPort, group: str, record: SendBackRecord) -> PutResult | Refused:
    """The send-back of ``record`` by ``group``: ``by_offset`` or ``by_receipt``."""
    if isinstance(record, ByOffset):
        return by_offset(service, group, record.physical_offset)
    if isinstance(record, ByPulled):
        return by_pulled(service, group, record)
    return by_receipt(service, group, record.topic, record.receipt_handle)


def by_offset(service: SendBackPort, group: str, physical_offset: int) -> PutResult | Refused:
    """The copy of the record at ``physical_offset`` (the caller is the store identity)."""
    record = _read(service, physical_offset)
    if isinstance(record, Refused):
        return record
    if not _consumable(record.record.topic, group):
        return Refused(f"{record.record.topic!r} at {physical_offset} is no topic {group} reads")
    return service.put_send_back(send_back_request(record, group, service.max_reconsume(group)))


def by_pulled(service: SendBackPort, group: str, pulled: ByPulled) -> PutResult | Refused:
    """The copy of the record at ``pulled.physical_offset``, which must be a record of
    ``pulled.topic`` (or the group's retry copy of one): the offset alone would let a caller
    copy any record into a retry topic it reads."""
    record = _read(service, pulled.physical_offset)
    if isinstance(record, Refused):
        return record
    stored = record.record.topic
    shown = stored
    if stored == retry_topic(group):
        shown = property_value(record.record.properties, RETRY_TOPIC) or stored
    if pulled.topic not in (stored, shown) or not _consumable(stored, group):
        return Refused(f"the record at {pulled.physical_offset} is not {pulled.topic!r}'s")
    limit = service.max_reconsume(group) if pulled.max_reconsume is None else pulled.max_reconsume
    copy = send_back_request(
        record, group, limit, delay_level=pulled.delay_level, keep_message_id=True
    )
    return service.put_send_back(copy)


def by_receipt(
    service: SendBackPort, group: str, topic: str, receipt_handle: str
) -> PutResult | Refused:
    """The copy of the record ``group`` was delivered as ``topic`` (stored name) under
    ``receipt_handle``; the delivery is acknowledged once the copy is stored."""
    handle = decode_receipt_handle(receipt_handle)
    if isinstance(handle, str):
        return Refused(handle)
    if service.groups.delivered_offset(group, topic, handle) != handle.physical_offset:
        return Refused("the receipt is stale, forged or not the group's")
    record = _read(service, handle.physical_offset)
    if isinstance(record, Refused):
        return record
    shown = record.record.topic
    if shown == retry_topic(group):
        shown = property_value(record.record.properties, RETRY_TOPIC) or shown
    if shown != topic:
        return Refused(f"the receipt's record was delivered as {shown!r}, not {topic!r}")
    copy = send_back_request(record, group, service.max_reconsume(group), handle.attempt)
    result = service.put_send_back(copy)
    if result.ok:
        service.groups.ack(group, topic, handle)  # stale meanwhile: acknowledged elsewhere
    return result


def _consumable(topic: str, group: str) -> bool:
    """A user topic (``namespace%name`` too), the group's own retry topic, or a dead letter;
    not a system topic (schedule, timer, transaction records) nor another group's retries."""
    if topic == retry_topic(group) or topic.startswith("%DLQ%"):
        return True
    return not topic.startswith("%") and topic_name_problem(topic.rpartition("%")[2]) is None


def _read(service: SendBackPort, physical_offset: int) -> DecodedRecord | Refused:
    try:
        return service.read_record(physical_offset)
    except (RmqError, ValueError, OSError) as err:
        return Refused(f"no record at {physical_offset}: {err}")
