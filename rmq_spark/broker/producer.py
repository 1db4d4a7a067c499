"""A thin Python producer for code that does not want the official RocketMQ client.

Owns ``Producer``: ``send(topic, body, ...)`` over our generated gRPC stubs to a broker's
``host:port``, or straight into an in-process ``embedded.Broker``. Retries transport failures
with the same message id (the broker stores a retried id once), raises ``SendRejectedError``
with the RocketMQ status code when the broker refuses. Does not own routing: it talks to the
one broker it is given (no QueryRoute, no Telemetry, no heartbeats).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import grpc

from rmq_spark.broker.grpc.grpc_client import client_metadata, messaging_channel
from rmq_spark.broker.message_id import MessageIdGenerator
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.security.auth import RequestSigner
from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import BrokerError, SendRejectedError

__all__ = [
    "Producer",
    "SendReceipt",
]

_RETRIED_GRPC_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN}
)
# Broker answers worth another attempt (the same id is stored once, so retrying is safe).
_RETRIED_STATUS = frozenset(
    {pb.INTERNAL_ERROR, pb.INTERNAL_SERVER_ERROR, pb.MASTER_PERSISTENCE_TIMEOUT, pb.PROXY_TIMEOUT}
)


@dataclasses.dataclass(frozen=True, slots=True)
class SendReceipt:
    """An acknowledged send: the message id (stored as UNIQ_KEY) and its queue offset."""

    message_id: str
    queue_offset: int


def _rejected(code: int, reason: str, message_id: str) -> SendRejectedError:
    name = pb.Code.Name(code) if code in pb.Code.values() else str(code)
    return SendRejectedError(code, name, reason, message_id)


class Producer:
    """Send messages to one broker, over gRPC or in-process.

    Parameters
    ----------
    target
        ``"host:port"`` of a broker's gRPC endpoint, or an ``embedded.Broker``.
    namespace
        RocketMQ namespace (topics are stored as ``namespace%topic``).
    request_timeout_s
        Deadline of one gRPC attempt.
    max_attempts
        Attempts per message on transport errors and retryable broker errors.
    clock
        Source of born timestamps and message-id seconds.
    credentials
        ``(access key, secret key)``: every call is signed (a broker with auth on).
    """

    def __init__(
        self,
        target: str | Any,
        *,
        namespace: str = "",
        request_timeout_s: float = 3.0,
        max_attempts: int = 3,
        clock: Clock | None = None,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts: must be >= 1, got {max_attempts}")
        self._clock = clock or SystemClock()
        self._ids = MessageIdGenerator(self._clock)
        self._namespace = namespace
        self._timeout_s = request_timeout_s
        self._max_attempts = max_attempts
        self._embedded = None if isinstance(target, str) else target
        self._channel: grpc.Channel | None = None
        self._stub: Any = None
        if isinstance(target, str):
            self._channel, self._stub = messaging_channel(target)
        client_id = f"rmq-spark-producer@{self._ids.next_id()}"
        self._sign = RequestSigner(credentials, self._clock)
        self._unsigned_metadata = client_metadata(client_id, namespace)

    def send(
        self,
        topic: str,
        body: bytes,
        *,
        tag: str | None = None,
        keys: tuple[str, ...] | list[str] = (),
        properties: Mapping[str, str] | None = None,
        message_group: str | None = None,
        delivery_timestamp_ms: int | None = None,
        message_id: str | None = None,
    ) -> SendReceipt:
        """Send one message and wait for the broker's acknowledgement.

        Returns
        -------
        SendReceipt

        Raises
        ------
        SendRejectedError
            The broker refused it (bad topic, too large, ...); ``err.code`` says why.
        BrokerError
            The broker could not be reached within ``max_attempts`` attempts.
        """
        message_id = message_id or self._ids.next_id()
        if self._embedded is not None:
            outcome = self._embedded.send(
                topic,
                body,
                tag=tag,
                keys=keys,
                properties=properties,
                message_group=message_group,
                delivery_timestamp_ms=delivery_timestamp_ms,
                message_id=message_id,
            )
            if not outcome.ok:
                from rmq_spark.broker.grpc.grpc_api import status_code

                raise _rejected(status_code(outcome.code), outcome.reason, message_id)
            return SendReceipt(message_id, outcome.queue_offset)
        request = self._request(
            topic, body, tag, keys, properties, message_group, delivery_timestamp_ms, message_id
        )
        return self._send_grpc(request, message_id)

    def _request(
        self,
        topic: str,
        body: bytes,
        tag: str | None,
        keys: tuple[str, ...] | list[str],
        properties: Mapping[str, str] | None,
        message_group: str | None,
        delivery_timestamp_ms: int | None,
        message_id: str,
    ) -> Any:
        message = pb.Message(body=bytes(body))
        message.topic.name = topic
        message.topic.resource_namespace = self._namespace
        message.user_properties.update(properties or {})
        props = message.system_properties
        props.message_id = message_id
        props.body_encoding = pb.IDENTITY
        props.message_type = pb.NORMAL
        props.born_timestamp.FromMilliseconds(self._clock.now_ms())
        if tag is not None:
            props.tag = tag
        props.keys.extend(keys)
        if message_group is not None:
            props.message_group = message_group
            props.message_type = pb.FIFO
        if delivery_timestamp_ms is not None:
            props.delivery_timestamp.FromMilliseconds(delivery_timestamp_ms)
            props.message_type = pb.DELAY
        return spb.SendMessageRequest(messages=[message])

    def _send_grpc(self, request: Any, message_id: str) -> SendReceipt:
        last_problem = ""
        for _attempt in range(self._max_attempts):
            try:
                response = self._stub.SendMessage(
                    request, timeout=self._timeout_s, metadata=self._sign(self._unsigned_metadata)
                )
            except grpc.RpcError as err:
                code = err.code() if hasattr(err, "code") else None
                last_problem = f"gRPC {code.name if code else 'error'}: {err}"
                if code in _RETRIED_GRPC_CODES:
                    continue
                raise BrokerError(f"send of {message_id} failed: {last_problem}") from err
            status = response.status
            if status.code == pb.OK:
                entry = response.entries[0] if response.entries else None
                return SendReceipt(message_id, entry.offset if entry is not None else -1)
            if status.code in _RETRIED_STATUS:
                last_problem = f"{pb.Code.Name(status.code)}: {status.message}"
                continue
            raise _rejected(status.code, status.message, message_id)
        raise BrokerError(
            f"send of {message_id} failed after {self._max_attempts} attempts: {last_problem}"
        )

    def close(self) -> None:
        """Close the gRPC channel (an embedded broker stays open: its owner closes it)."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
