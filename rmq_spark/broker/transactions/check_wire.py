"""The ``RecoverOrphanedTransactionCommand`` a check-back writes on a producer's Telemetry
stream: the half as a ``Message`` a client can decode (IDENTITY encoding, topic, id, tag,
keys, user properties, digest; GRPC_V2_PROTOCOL.md section 3)."""

from __future__ import annotations

import hashlib
from typing import Any

from rmq_spark.broker.grpc.consume_wire import split_topic
from rmq_spark.broker.grpc.grpc_wire import status
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.send_model import RESERVED_PROPERTY_KEYS
from rmq_spark.broker.transactions.records import HalfRef
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.properties import KEYS, REAL_QID, REAL_TOPIC, TAGS, UNIQ_KEY, parse_properties

__all__ = ["recover_command"]


def recover_command(half: MessageRecord, properties: str, renewed: HalfRef) -> Any:
    """The command asking about ``half`` (its re-put at ``renewed``, with ``properties``)."""
    props = parse_properties(properties)
    name, namespace = split_topic(props.get(REAL_TOPIC, ""))
    message = pb.Message(body=half.body)
    message.topic.name = name
    message.topic.resource_namespace = namespace
    message.user_properties.update(
        {k: v for k, v in props.items() if k not in RESERVED_PROPERTY_KEYS}
    )
    sp = message.system_properties
    if props.get(TAGS):
        sp.tag = props[TAGS]
    if props.get(KEYS):
        sp.keys.extend(props[KEYS].split(" "))
    sp.message_id = props.get(UNIQ_KEY, "")
    sp.body_digest.type = pb.MD5
    sp.body_digest.checksum = hashlib.md5(half.body).hexdigest().upper()
    sp.body_encoding = pb.IDENTITY
    sp.message_type = pb.TRANSACTION
    sp.born_timestamp.FromMilliseconds(half.born_timestamp_ms)
    sp.born_host = half.born_host.ip
    sp.store_timestamp.FromMilliseconds(half.store_timestamp_ms)
    sp.queue_id = int(props.get(REAL_QID, "0") or 0)
    sp.queue_offset = renewed.queue_offset
    command = spb.TelemetryCommand(status=status(pb.OK))
    command.recover_orphaned_transaction_command.message.CopyFrom(message)
    return command
