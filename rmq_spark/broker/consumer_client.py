"""A thin Python consumer for code that does not want the official RocketMQ client.

Owns ``Consumer``: ``receive`` / ``ack`` / ``change_invisible_duration`` of one topic in one
consumer group, over our generated gRPC stubs to a broker's ``host:port``, or straight into an
in-process ``embedded.Broker`` (``broker.consumer(...)``); and ``ReceivedMessage``. The broker's
rules are the same either way (POP semantics: a received message is invisible to the group
until acknowledged or until its invisible time passes, then it comes back with
``delivery_attempt + 1``). Does not own routing or heartbeats: it talks to the one broker it
is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import grpc

from rmq_spark.broker.consumer.service import Rejected
from rmq_spark.broker.grpc.consume_grpc import consume_status_code
from rmq_spark.broker.grpc.consume_wire import delivered_message
from rmq_spark.broker.grpc.grpc_client import client_metadata, messaging_channel
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.security.auth import RequestSigner
from rmq_spark.broker.topics import full_topic_name
from rmq_spark.clock import SystemClock
from rmq_spark.errors import BrokerError, ConsumeRejectedError

__all__ = ["Consumer", "ReceivedMessage"]

_FILTER_TYPES = {"TAG": pb.TAG, "SQL92": pb.SQL}


@dataclass(slots=True)
class ReceivedMessage:
    """One delivery of a message; ``receipt_handle`` names this delivery (ack it with it)."""

    topic: str
    body: bytes
    message_id: str
    receipt_handle: str
    delivery_attempt: int
    queue_id: int
    queue_offset: int
    tag: str | None = None
    keys: tuple[str, ...] = ()
    message_group: str | None = None
    born_timestamp_ms: int = 0
    store_timestamp_ms: int = 0
    properties: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_protobuf(cls, message: Any) -> ReceivedMessage:
        sp = message.system_properties
        return cls(
            topic=message.topic.name,
            body=bytes(message.body),
            message_id=sp.message_id,
            receipt_handle=sp.receipt_handle,
            delivery_attempt=sp.delivery_attempt,
            queue_id=sp.queue_id,
            queue_offset=sp.queue_offset,
            tag=sp.tag if sp.HasField("tag") else None,
            keys=tuple(sp.keys),
            message_group=sp.message_group if sp.HasField("message_group") else None,
            born_timestamp_ms=sp.born_timestamp.ToMilliseconds(),
            store_timestamp_ms=sp.store_timestamp.ToMilliseconds(),
            properties=dict(message.user_properties),
        )


def _rejected(code: int, reason: str) -> ConsumeRejectedError:
    name = pb.Code.Name(code) if code in pb.Code.values() else str(code)
    return ConsumeRejectedError(code, name, reason)


class Consumer:
    """Receive messages of ``topic`` as consumer ``group``, over gRPC or in-process.

    Parameters
    ----------
    target
        ``"host:port"`` of a broker's gRPC endpoint, or an ``embedded.Broker``.
    group, topic
        The consumer group and the topic (without namespace).
    expression, filter_kind
        The subscription: a TAG expression (``"*"``, ``"a || b"``) or, with
        ``filter_kind="SQL92"``, an SQL92 one.
    namespace
        RocketMQ namespace of the topic and group.
    request_timeout_s
        Deadline of an ack or change, and what a receive adds to its wait.
    credentials
        ``(access key, secret key)``: every call is signed (a broker with auth on).
    """

    def __init__(
        self,
        target: str | Any,
        group: str,
        topic: str,
        expression: str = "*",
        *,
        filter_kind: str = "TAG",
        namespace: str = "",
        request_timeout_s: float = 3.0,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        if filter_kind not in _FILTER_TYPES:
            raise ValueError(f"filter_kind: must be TAG or SQL92, got {filter_kind!r}")
        self.group, self.topic = group, topic
        self._expression, self._filter_kind = expression, filter_kind
        self._namespace = namespace
        self._timeout_s = request_timeout_s
        self._embedded = None if isinstance(target, str) else target
        self._channel: grpc.Channel | None = None
        self._stub: Any = None
        if isinstance(target, str):
            self._channel, self._stub = messaging_channel(target)
        self._sign = RequestSigner(credentials, SystemClock())  # signed per call (auth on)
        self._unsigned_metadata = client_metadata(f"rmq-spark-consumer@{id(self):x}", namespace)

    def receive(
        self, max_messages: int = 32, invisible_ms: int = 30_000, wait_ms: int = 0
    ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` messages (at most 32), each invisible to the group for
        ``invisible_ms`` (10 s to 12 h); waits up to ``wait_ms`` when none is there.

        Raises
        ------
        ConsumeRejectedError
            A bad group, topic, filter expression or invisible time.
        BrokerError
            The broker could not be reached.
        """
        if self._embedded is not None:
            return self._receive_embedded(max_messages, invisible_ms, wait_ms)
        request = spb.ReceiveMessageRequest(batch_size=max_messages)
        request.group.name, request.group.resource_namespace = self.group, self._namespace
        queue = request.message_queue
        queue.topic.name, queue.topic.resource_namespace = self.topic, self._namespace
        queue.id = -1
        request.filter_expression.type = _FILTER_TYPES[self._filter_kind]
        request.filter_expression.expression = self._expression
        request.invisible_duration.FromMilliseconds(invisible_ms)
        request.long_polling_timeout.FromMilliseconds(wait_ms)
        messages: list[ReceivedMessage] = []
        status: Any = None
        try:
            for response in self._stub.ReceiveMessage(
                request,
                timeout=wait_ms / 1000 + self._timeout_s,
                metadata=self._sign(self._unsigned_metadata),
            ):
                kind = response.WhichOneof("content")
                if kind == "status":
                    status = response.status
                elif kind == "message":
                    messages.append(ReceivedMessage.from_protobuf(response.message))
        except grpc.RpcError as err:
            raise BrokerError(f"receive from {self.topic} failed: {err}") from err
        if status is not None and status.code not in (pb.OK, pb.MESSAGE_NOT_FOUND):
            raise _rejected(status.code, status.message)
        return messages

    def _receive_embedded(
        self, max_messages: int, invisible_ms: int, wait_ms: int
    ) -> list[ReceivedMessage]:
        consume = self._embedded.consume
        receive = consume.prepare(
            full_topic_name(self.group, self._namespace),
            self.topic,
            self._namespace,
            filter_kind=self._filter_kind,
            expression=self._expression,
            batch_size=max_messages,
            invisible_ms=invisible_ms,
        )
        if isinstance(receive, Rejected):
            raise _rejected(consume_status_code(receive.code), receive.reason)
        found = consume.receive_blocking(receive, wait_ms / 1000)
        return [ReceivedMessage.from_protobuf(delivered_message(d)) for d in found]

    def ack(self, message: ReceivedMessage) -> None:
        """Acknowledge ``message``: never delivered to this group again.

        Raises
        ------
        ConsumeRejectedError
            ``INVALID_RECEIPT_HANDLE``: acknowledged already, or delivered again since.
        """
        if self._embedded is not None:
            rejected = self._embedded.consume.ack(
                self._group_name(), self._topic_name(), message.receipt_handle
            )
            self._raise(rejected)
            return
        request = spb.AckMessageRequest()
        request.group.name, request.group.resource_namespace = self.group, self._namespace
        request.topic.name, request.topic.resource_namespace = self.topic, self._namespace
        request.entries.add(message_id=message.message_id, receipt_handle=message.receipt_handle)
        response = self._call("AckMessage", request)
        if response.status.code != pb.OK:
            raise _rejected(response.status.code, response.status.message)

    def change_invisible_duration(self, message: ReceivedMessage, invisible_ms: int) -> None:
        """Make ``message`` visible to the group again ``invisible_ms`` from now (0: at once,
        a nack); ``message.receipt_handle`` becomes the new handle."""
        if self._embedded is not None:
            changed = self._embedded.consume.change_invisible(
                self._group_name(), self._topic_name(), message.receipt_handle, invisible_ms
            )
            if not isinstance(changed, str):
                self._raise(changed)
                return
            message.receipt_handle = changed
            return
        request = spb.ChangeInvisibleDurationRequest(
            receipt_handle=message.receipt_handle, message_id=message.message_id
        )
        request.group.name, request.group.resource_namespace = self.group, self._namespace
        request.topic.name, request.topic.resource_namespace = self.topic, self._namespace
        request.invisible_duration.FromMilliseconds(invisible_ms)
        response = self._call("ChangeInvisibleDuration", request)
        if response.status.code != pb.OK:
            raise _rejected(response.status.code, response.status.message)
        message.receipt_handle = response.receipt_handle

    def _group_name(self) -> str:
        return full_topic_name(self.group, self._namespace)

    def _topic_name(self) -> str:
        return full_topic_name(self.topic, self._namespace)

    @staticmethod
    def _raise(rejected: Rejected | None) -> None:
        if rejected is not None:
            raise _rejected(consume_status_code(rejected.code), rejected.reason)

    def _call(self, method: str, request: Any) -> Any:
        try:
            return getattr(self._stub, method)(
                request, timeout=self._timeout_s, metadata=self._sign(self._unsigned_metadata)
            )
        except grpc.RpcError as err:
            raise BrokerError(f"{method} failed: {err}") from err

    def close(self) -> None:
        """Close the gRPC channel (an embedded broker stays open: its owner closes it)."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
