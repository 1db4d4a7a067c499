"""The client side of the broker's gRPC protocol, shared by our own clients (``Producer``,
``Consumer``, ``OffsetClient``, the Spark sink, the delay job's redelivery sink): one way to
open a channel to a broker and one set of headers, as the official clients send them."""

from __future__ import annotations

from typing import Any

__all__ = ["client_metadata", "failure_code", "messaging_channel"]

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


# The server's deadline is the client's less the request's time in flight: a reset at most this
# share of the timeout early is still the deadline's.
_DEADLINE_SLACK = 0.98


def failure_code(err: Any, timeout_s: float, elapsed_s: float) -> Any:
    """The ``grpc.StatusCode`` a caller should act on for the failed call ``err`` made with
    ``timeout_s``, ``elapsed_s`` after it began (``None``: not a status error).

    A server resets a call whose deadline passed (RST_STREAM CANCEL: grpc-go's server, so the
    broker's native front, and grpc-java's do), so a client whose own deadline timer fires late
    (a busy machine) reads CANCELLED where the call timed out: that is DEADLINE_EXCEEDED, and
    retried as one. CANCELLED before the deadline is left as it is.
    """
    import grpc

    code = err.code() if hasattr(err, "code") else None
    if code == grpc.StatusCode.CANCELLED and elapsed_s >= timeout_s * _DEADLINE_SLACK:
        return grpc.StatusCode.DEADLINE_EXCEEDED
    return code
