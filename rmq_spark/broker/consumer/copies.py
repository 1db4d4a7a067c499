"""Retry and DLQ copies of a consumed message (spec 11): properties, put, and send-back.

Owns the one property builder for a copy bound for ``%RETRY%<group>`` (through
SCHEDULE_TOPIC_XXXX, delay level ``3 + reconsume times``) or ``%DLQ%<group>``, used by the
broker's consume path (``service.py``: a POP message that came back or ran out of attempts)
and by a send-back that names the failed message by its CommitLog offset, as RocketMQ's
``CONSUMER_SEND_MSG_BACK`` does (``send_back_request``; who may ask is ``send_back.py``'s). A
group's attempts count a record's RECONSUMETIMES only for its own ``%RETRY%`` copies
(``prior_reconsumes``): a dead letter or another group's retry record read by a group is new to
it. A send-back
copy gets a UNIQ_KEY derived from (group, origin message id, reconsume times) and an
idempotent put, so a replayed send-back of one failure stores one copy (within the store's
idempotency window).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.msg_id import offset_msg_id
from rmq_spark.store.properties import (
    DELAY,
    DLQ_ORIGIN_MESSAGE_ID,
    DLQ_ORIGIN_TOPIC,
    MAX_RECONSUME_TIMES,
    ORIGIN_MESSAGE_ID,
    REAL_QID,
    REAL_TOPIC,
    RECONSUME_TIME,
    RETRY_TOPIC,
    UNIQ_KEY,
    WAIT,
    parse_properties,
)
from rmq_spark.store.put import PutRequest

__all__ = [
    "RETRY_BASE_LEVEL",
    "copy_properties",
    "dlq_properties",
    "group_copy_request",
    "prior_reconsumes",
    "retry_properties",
    "send_back_request",
    "send_back_uniq_key",
]

RETRY_BASE_LEVEL = 3  # a retry's delay level: 3 + reconsume times (10 s, 30 s, 1 m, ...)


def prior_reconsumes(record: DecodedRecord, group: str) -> int:
    """The reconsume times ``group`` already spent on ``record``: its RECONSUMETIMES when it
    is the group's own ``%RETRY%<group>`` copy, else 0. Another group's copy (a ``%DLQ%g``
    record, a retry record some other group or a RocketMQ broker wrote) is a new message to
    ``group``: its count belongs to the group that failed it."""
    original = record.record
    return original.reconsume_times if original.topic == f"%RETRY%{group}" else 0


def copy_properties(
    record: DecodedRecord,
    properties: Mapping[str, str],
    dropped: tuple[str, ...],
    reconsume: int,
    max_reconsume: int,
) -> dict[str, str]:
    """A retry or DLQ copy's properties (spec 11): the original's without its timer
    properties and ``dropped``, with where it came from and how often it was consumed."""
    original = record.record
    copy = {k: v for k, v in properties.items() if k not in dropped and not k.startswith("TIMER_")}
    if not original.topic.startswith("%RETRY%"):  # a %DLQ% record retries as the %DLQ% topic
        copy[RETRY_TOPIC] = original.topic
    copy.setdefault(RETRY_TOPIC, original.topic)
    copy.setdefault(ORIGIN_MESSAGE_ID, offset_msg_id(original.store_host, record.position))
    copy[RECONSUME_TIME] = str(reconsume)
    copy[MAX_RECONSUME_TIMES] = str(max_reconsume)
    return copy


def retry_properties(
    record: DecodedRecord, properties: Mapping[str, str], reconsume: int, max_reconsume: int
) -> dict[str, str]:
    """Bound for ``%RETRY%<group>`` with delay level 2 + ``reconsume`` (3 + the reconsume
    times before this failure): the put path turns DELAY into a SCHEDULE_TOPIC_XXXX record."""
    copy = copy_properties(record, properties, (REAL_TOPIC, REAL_QID), reconsume, max_reconsume)
    copy[WAIT] = "false"
    copy[DELAY] = str(RETRY_BASE_LEVEL - 1 + reconsume)
    return copy


def dlq_properties(
    record: DecodedRecord, properties: Mapping[str, str], attempts: int, max_reconsume: int
) -> dict[str, str]:
    """Bound for ``%DLQ%<group>``: where it came from (DLQ_ORIGIN_TOPIC / _MESSAGE_ID)."""
    copy = copy_properties(record, properties, (DELAY,), attempts, max_reconsume)
    copy[DLQ_ORIGIN_TOPIC] = copy[RETRY_TOPIC]
    copy[DLQ_ORIGIN_MESSAGE_ID] = properties.get(UNIQ_KEY, copy[ORIGIN_MESSAGE_ID])
    return copy


def group_copy_request(
    topic: str,
    record: DecodedRecord,
    properties: Mapping[str, str],
    reconsume: int,
    *,
    idempotent: bool,
) -> PutRequest:
    """The put of a copy of ``record`` into queue 0 of ``topic``."""
    original = record.record
    return PutRequest(
        topic=topic,
        queue_id=0,
        body=original.body,
        properties=dict(properties),
        flag=original.flag,
        sys_flag=original.sys_flag,
        born_timestamp_ms=original.born_timestamp_ms,
        born_host=original.born_host,
        reconsume_times=reconsume,
        idempotent=idempotent,
    )


def send_back_uniq_key(group: str, origin_message_id: str, reconsume: int) -> str:
    """The UNIQ_KEY of a send-back copy: 32 hex digits, the same for the same failure."""
    digest = hashlib.sha256(f"{group}\0{origin_message_id}\0{reconsume}".encode()).hexdigest()
    return digest[:32].upper()


def send_back_request(
    record: DecodedRecord,
    group: str,
    max_reconsume: int,
    attempts: int = 1,
    *,
    delay_level: int = 0,
    keep_message_id: bool = False,
) -> PutRequest:
    """The copy of a message ``group`` failed to consume, as RocketMQ's send-back: into
    ``%RETRY%<group>`` (delay level 3 + its reconsume times) while its reconsume times are
    below ``max_reconsume``, else into ``%DLQ%<group>``. ``attempts``: the failed deliveries
    of this copy (a receipt's attempt; 1 for the Spark helper's). ``delay_level`` as a 4.x
    consumer asks: 0 the default, above 0 that level, below 0 straight to the DLQ.
    Idempotent (module doc), unless ``keep_message_id``: a 4.x consumer's copy keeps the
    message's UNIQ_KEY (its msgId across retries, as RocketMQ's), so a replayed send-back
    may store a second copy (at least once)."""
    properties = parse_properties(record.record.properties)
    tried = prior_reconsumes(record, group) + attempts
    if tried > max_reconsume or delay_level < 0:
        topic = f"%DLQ%{group}"
        copy = dlq_properties(record, properties, tried, max_reconsume)
        copy[DLQ_ORIGIN_MESSAGE_ID] = copy[ORIGIN_MESSAGE_ID]
    else:
        topic = f"%RETRY%{group}"
        copy = retry_properties(record, properties, tried, max_reconsume)
        if delay_level > 0:
            copy[DELAY] = str(delay_level)
    if keep_message_id:
        return group_copy_request(topic, record, copy, tried, idempotent=False)
    copy[UNIQ_KEY] = send_back_uniq_key(group, copy[ORIGIN_MESSAGE_ID], tried)
    return group_copy_request(topic, record, copy, tried, idempotent=True)
