"""Protobuf for the consume path: a stored record as a delivered ``Message``, consumer settings.

Owns what a delivered message carries (what ``GrpcConverter.buildMessage`` of the Java proxy
sets: tag, keys, message id, MD5 digest in uppercase hex, body encoding, message type, born
and store timestamps and hosts, delivery timestamp, message group, receipt handle, queue id
and offset, delivery attempt, user properties without the system keys) and the Telemetry
settings reply to a consumer (``GrpcClientSettingsManager.mergeSubscriptionData``). No I/O.
"""

from __future__ import annotations

import hashlib
from typing import Any

from rmq_spark.broker.consumer.groups import Delivery
from rmq_spark.broker.consumer.ports import GroupSettingsLike
from rmq_spark.broker.consumer.service import BATCH_MAX, POLL_MS_MAX
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.service import BORN_HOST, RESERVED_PROPERTY_KEYS, TRACE_CONTEXT
from rmq_spark.store.msg_id import offset_msg_id
from rmq_spark.store.properties import (
    DELAY,
    DLQ_ORIGIN_MESSAGE_ID,
    DLQ_ORIGIN_TOPIC,
    KEYS,
    SHARDING_KEY,
    TAGS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    UNIQ_KEY,
)

__all__ = ["CUSTOMIZED_BACKOFF_MS", "consumer_settings", "delivered_message", "split_topic"]

_COMPRESSED_FLAG = 0x1  # MessageSysFlag.COMPRESSED_FLAG

CUSTOMIZED_BACKOFF_MS = tuple(
    s * 1000
    for s in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
)
"""CustomizedRetryPolicy's default ``next``: the redelivery delays of attempts 1, 2, ..."""


def split_topic(stored: str) -> tuple[str, str]:
    """``ns%topic`` -> (``topic``, ``ns``), as ``NamespaceUtil`` (system prefixes stay)."""
    for prefix in ("%RETRY%", "%DLQ%"):
        if stored.startswith(prefix):
            name, namespace = split_topic(stored[len(prefix) :])
            return prefix + name, namespace
    namespace, sep, name = stored.partition("%")
    return (name, namespace) if sep else (stored, "")


def _message_type(properties: dict[str, str]) -> int:
    if DELAY in properties or TIMER_DELIVER_MS in properties or TIMER_DELAY_SEC in properties:
        return pb.DELAY
    if SHARDING_KEY in properties:
        return pb.FIFO
    return pb.NORMAL


def delivered_message(delivery: Delivery) -> Any:
    """The ``apache.rocketmq.v2.Message`` a consumer receives for one delivery."""
    record, properties = delivery.record.record, delivery.properties
    name, namespace = split_topic(delivery.topic)  # a retry copy shows its original topic
    message = pb.Message(body=record.body)
    message.topic.name = name
    message.topic.resource_namespace = namespace
    message.user_properties.update(
        {k: v for k, v in properties.items() if k not in RESERVED_PROPERTY_KEYS}
    )
    sp = message.system_properties
    if TAGS in properties:
        sp.tag = properties[TAGS]
    if properties.get(KEYS):
        sp.keys.extend(properties[KEYS].split(" "))
    sp.message_id = properties.get(UNIQ_KEY) or offset_msg_id(
        record.store_host, record.physical_offset
    )
    sp.body_digest.type = pb.MD5
    sp.body_digest.checksum = hashlib.md5(record.body).hexdigest().upper()
    sp.body_encoding = pb.GZIP if record.sys_flag & _COMPRESSED_FLAG else pb.IDENTITY
    sp.message_type = _message_type(properties)
    sp.born_timestamp.FromMilliseconds(record.born_timestamp_ms)
    sp.born_host = properties.get(BORN_HOST) or record.born_host.ip
    sp.store_timestamp.FromMilliseconds(record.store_timestamp_ms)
    sp.store_host = str(record.store_host)
    if properties.get(TIMER_DELIVER_MS, "").isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(properties[TIMER_DELIVER_MS]))
    if SHARDING_KEY in properties:
        sp.message_group = properties[SHARDING_KEY]
    sp.receipt_handle = delivery.handle.encode()
    sp.queue_id = record.queue_id
    sp.queue_offset = record.queue_offset
    sp.invisible_duration.FromMilliseconds(delivery.handle.invisible_ms)
    sp.delivery_attempt = delivery.attempt
    if TRACE_CONTEXT in properties:
        sp.trace_context = properties[TRACE_CONTEXT]
    if DLQ_ORIGIN_TOPIC in properties and DLQ_ORIGIN_MESSAGE_ID in properties:
        sp.dead_letter_queue.topic = properties[DLQ_ORIGIN_TOPIC]
        sp.dead_letter_queue.message_id = properties[DLQ_ORIGIN_MESSAGE_ID]
    return message


def consumer_settings(reply: Any, settings: GroupSettingsLike) -> None:
    """Fill a consumer's settings reply as the proxy does for a group with RocketMQ's
    default retry policy (CUSTOMIZED: the Python PushConsumer ignores an exponential one)."""
    reply.subscription.receive_batch_size = BATCH_MAX
    reply.subscription.long_polling_timeout.FromMilliseconds(POLL_MS_MAX)
    reply.subscription.fifo = settings.fifo
    backoff = reply.backoff_policy
    backoff.Clear()
    backoff.max_attempts = settings.retry_max_times + 1
    for delay_ms in CUSTOMIZED_BACKOFF_MS:
        backoff.customized_backoff.next.add().FromMilliseconds(delay_ms)
