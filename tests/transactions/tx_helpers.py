"""Helpers of the transaction tests: transactional sends with the official client, raw
EndTransaction calls, and what the store holds."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
from broker_harness import bench_lock, props, read_records

from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.store.message import MessageRecord

HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP = "RMQ_SYS_TRANS_OP_HALF_TOPIC"


def send_half(rocketmq: ModuleType, producer: Any, topic: str, body: bytes) -> tuple[Any, Any]:
    """``(transaction, receipt)`` of one half message."""
    transaction = producer.begin_transaction()
    message = rocketmq.Message()
    message.topic = topic
    message.body = body
    receipt = producer.send(message, transaction)
    return transaction, receipt


def end_call(
    address: str,
    topic: str,
    message_id: str,
    transaction_id: str,
    resolution: int,
    metadata: Any = (),
) -> Any:
    """One raw EndTransaction; its status."""
    request = spb.EndTransactionRequest(
        message_id=message_id, transaction_id=transaction_id, resolution=resolution
    )
    request.topic.name = topic
    channel = grpc.insecure_channel(address)
    try:
        stub = spb_grpc.MessagingServiceStub(channel)
        metadata = metadata or (("x-mq-client-id", "tx-test-client"),)
        return stub.EndTransaction(request, metadata=metadata, timeout=10).status
    finally:
        channel.close()


def records_of(store_dir: Path, topic: str) -> list[MessageRecord]:
    return [r for r in read_records(store_dir) if r.topic == topic]


def received_bodies(consumer: Any, rounds: int = 2) -> list[bytes]:
    """Everything ``consumer`` receives in ``rounds`` long polls, acknowledged."""
    bodies = []
    for _ in range(rounds):
        for message in consumer.receive(16, 10) or []:
            bodies.append(bytes(message.body))
            consumer.ack(message)
    return bodies


__all__ = [
    "HALF",
    "OP",
    "bench_lock",
    "end_call",
    "props",
    "received_bodies",
    "records_of",
    "send_half",
]
