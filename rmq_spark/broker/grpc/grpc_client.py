"""The client side of the broker's gRPC protocol, shared by our own clients (``Producer``,
``Consumer``, ``OffsetClient``, the Spark sink, the delay job's redelivery sink): one way to
open a channel to a broker and one set of headers, as the official clients send them."""

from __future__ import annotations

from typing import Any

__all__ = ["client_metadata", "messaging_channel"]

# No size caps (the broker enforces its own), no transparent retries (a retried send could be
# stored twice; each client decides itself what to retry).
_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.enable_retries", 0),
]


def messaging_channel(address: str) -> tuple[Any, Any]:
    """``(channel, MessagingServiceStub)`` to the broker at ``host:port`` (plaintext)."""
    import grpc

    from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc

    channel = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
    return channel, spb_grpc.MessagingServiceStub(channel)


def client_metadata(client_id: str, namespace: str = "") -> tuple[tuple[str, str], ...]:
    """The headers every call carries (the broker keys clients and receipts by the id)."""
    return (
        ("x-mq-client-id", client_id),
        ("x-mq-language", "PYTHON"),
        ("x-mq-protocol", "GRPC_V2"),
        ("x-mq-client-version", "rmq-spark"),
        ("x-mq-namespace", namespace),
    )
