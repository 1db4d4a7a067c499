"""The dead-letter queues: each group's ``%DLQ%<group>`` read from the store, and re-sending
one of its messages to the topic it came from through a running broker.

Owns what a re-send carries (RocketMQ's ``consumeMessageDirectly`` hands a dead letter back
as a message of its ``RETRY_TOPIC``: here the body, tag, keys, message group and user
properties go to ``DLQ_ORIGIN_TOPIC``, falling back to ``RETRY_TOPIC``) and its message id:
derived from the dead letter's place in the log, so a repeated re-send of the same dead letter
(a double click, a retried POST) is stored once by the broker's idempotent put. The send goes
through ``broker/producer.py`` with the operator's credentials, so the broker's ACL (``Pub``
on the origin topic) decides; nothing here writes to the store.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.broker.producer import Producer
from rmq_spark.broker.send_model import RESERVED_PROPERTY_KEYS
from rmq_spark.broker.topics import topic_name_problem
from rmq_spark.cli.dashboard.data import topic_queues
from rmq_spark.cli.dashboard.files import LogReader, topic_queue_snapshots
from rmq_spark.errors import ConfigError, MessageNotFoundError
from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR
from rmq_spark.store.properties import (
    DLQ_ORIGIN_TOPIC,
    KEY_SEPARATOR,
    KEYS,
    RETRY_TOPIC,
    SHARDING_KEY,
    TAGS,
    parse_properties,
)
from rmq_spark.store.view import StoreView

__all__ = ["DLQ_PREFIX", "DlqRow", "Resent", "dlq_rows", "dlq_topic", "resend", "resend_id"]

DLQ_PREFIX = "%DLQ%"


@dataclass(frozen=True, slots=True)
class DlqRow:
    group: str
    topic: str  # %DLQ%<group>
    min_offset: int
    max_offset: int
    size_bytes: int

    @property
    def depth(self) -> int:
        return self.max_offset - self.min_offset


@dataclass(frozen=True, slots=True)
class Resent:
    """A re-sent dead letter: where it went and the id the broker stored it under."""

    topic: str
    message_id: str
    queue_offset: int


def dlq_topic(group: str) -> str:
    return f"{DLQ_PREFIX}{group}"


def dlq_rows(root: Path) -> list[DlqRow]:
    """Every group's dead-letter queue that has a ConsumeQueue, by group."""
    directory = root / CONSUME_QUEUE_DIR
    if not directory.is_dir():
        return []
    rows = []
    for path in sorted(p for p in directory.iterdir() if p.name.startswith(DLQ_PREFIX)):
        queues = topic_queues(root, path.name)
        rows.append(
            DlqRow(
                path.name[len(DLQ_PREFIX) :],
                path.name,
                min((q.min_offset for q in queues), default=0),
                max((q.max_offset for q in queues), default=0),
                sum(q.size_bytes for q in queues),
            )
        )
    return rows


def dead_letter(root: Path, group: str, queue_offset: int) -> DecodedRecord:
    """The dead letter at ``queue_offset`` of ``%DLQ%<group>`` (its queue 0, as RocketMQ's).

    Raises
    ------
    MessageNotFoundError
        No such queue or offset (never written, or deleted by retention).
    """
    topic = dlq_topic(group)
    queue = {q.queue_id: q for q in topic_queue_snapshots(root, topic)}.get(0)
    physical = queue.physical_at(queue_offset) if queue is not None else None
    with LogReader(StoreView.open(root)) as log:
        found = log.decoded(physical) if physical is not None else None
    if found is None:
        raise MessageNotFoundError(f"no dead letter at offset {queue_offset} of {topic!r}")
    return found


def resend_id(decoded: DecodedRecord) -> str:
    """The message id of a re-send of this dead letter: 32 hex digits, the same every time."""
    seed = f"dlq-resend\0{decoded.record.topic}\0{decoded.position}"
    return hashlib.sha256(seed.encode()).hexdigest()[:32].upper()


def resend(
    root: Path,
    group: str,
    queue_offset: int,
    broker: str,
    credentials: tuple[str, str] | None,
) -> Resent:
    """Send the dead letter at ``queue_offset`` of ``%DLQ%<group>`` back to its origin topic
    through the broker at ``broker`` (``host:port``).

    Raises
    ------
    MessageNotFoundError
        No such dead letter.
    ConfigError
        It names no origin topic a producer may send to.
    SendRejectedError
        The broker refused (``UNAUTHORIZED``: the credentials lack ``Pub`` on the topic).
    BrokerError
        The broker could not be reached.
    """
    decoded = dead_letter(root, group, queue_offset)
    properties = parse_properties(decoded.record.properties)
    topic = properties.get(DLQ_ORIGIN_TOPIC) or properties.get(RETRY_TOPIC) or ""
    problem = topic_name_problem(topic) if topic else "it names no origin topic"
    if problem is not None:
        raise ConfigError(
            "offset", f"cannot re-send {decoded.record.topic}@{queue_offset}: {problem}"
        )
    user = {k: v for k, v in properties.items() if k not in RESERVED_PROPERTY_KEYS}
    message_id = resend_id(decoded)
    with Producer(broker, credentials=credentials) as producer:
        receipt = producer.send(
            topic,
            decoded.record.body,
            tag=properties.get(TAGS),
            keys=[k for k in properties.get(KEYS, "").split(KEY_SEPARATOR) if k],
            properties=user,
            message_group=properties.get(SHARDING_KEY),
            message_id=message_id,
        )
    return Resent(topic, receipt.message_id, receipt.queue_offset)
