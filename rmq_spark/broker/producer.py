"""A thin Python producer for code that does not want the official RocketMQ client.

Owns ``Producer``: ``send(topic, body, ...)`` over our generated gRPC stubs, or straight into
an in-process ``embedded.Broker``. Over gRPC the broker given is an access point: the topic's
route (QueryRoute, refreshed every ``route_refresh_s``) lists the queues of every broker of a
cluster, and sends go round-robin over them, straight to each queue's broker, as RocketMQ's
producers do (seed 003). A failed attempt is retried on another broker with the same message
id (one broker stores a retried id once; a send retried elsewhere after a lost answer can be
stored on two brokers: at least once, as RocketMQ). With ``send_latency_fault_enable`` slow and
failing brokers are avoided for a while (``cluster/fault.py``). Raises ``SendRejectedError``
with the RocketMQ status code when a broker refuses. No heartbeats. Transactions
(``send_in_transaction`` and the ``checker``'s Telemetry streams) are ``producer_tx.py``'s.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import grpc

from rmq_spark.broker.cluster.fault import (
    NOT_AVAILABLE_MS,
    LatencyFaultTable,
    QueueChooser,
    RoutedQueue,
)
from rmq_spark.broker.cluster.publish_routes import ROUTE_REFRESH_S, PublishRoutes
from rmq_spark.broker.grpc.grpc_client import client_metadata, failure_code, messaging_channel
from rmq_spark.broker.message_id import MessageIdGenerator
from rmq_spark.broker.producer_tx import (
    TX_GROUP_PROPERTY,
    Checker,
    CheckStreams,
    Transaction,
)
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.security.auth import RequestSigner
from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import BrokerError, SendRejectedError

__all__ = [
    "Producer",
    "SendReceipt",
    "Transaction",
]

log = logging.getLogger("rmq_spark.broker.cluster")

_RETRIED_GRPC_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN}
)
# Broker answers worth another attempt (the same id is stored once, so retrying is safe).
_RETRIED_STATUS = frozenset(
    {pb.INTERNAL_ERROR, pb.INTERNAL_SERVER_ERROR, pb.MASTER_PERSISTENCE_TIMEOUT, pb.PROXY_TIMEOUT}
)


@dataclasses.dataclass(frozen=True, slots=True)
class SendReceipt:
    """An acknowledged send: the message id (stored as UNIQ_KEY), its queue offset, and the
    broker that stored it (its name in the route; the access point's address without one)."""

    message_id: str
    queue_offset: int
    broker: str = ""
    transaction_id: str = ""  # a half message's (``send_in_transaction``)


def _rejected(code: int, reason: str, message_id: str) -> SendRejectedError:
    name = pb.Code.Name(code) if code in pb.Code.values() else str(code)
    return SendRejectedError(code, name, reason, message_id)


class Producer:
    """Send messages to the brokers of a topic's route, over gRPC, or in-process.

    Parameters
    ----------
    target
        ``"host:port"`` of a broker's gRPC endpoint (the access point), or an
        ``embedded.Broker``.
    namespace
        RocketMQ namespace (topics are stored as ``namespace%topic``).
    request_timeout_s
        Deadline of one gRPC attempt.
    retry_times_when_send_failed
        Further attempts after a transport error or a retryable broker error, each on another
        broker when the route has one (RocketMQ's ``retryTimesWhenSendFailed``, default 2).
    max_attempts
        The same as ``1 + retry_times_when_send_failed`` (the older name; wins when given).
    send_latency_fault_enable
        Avoid brokers that failed or were slow (RocketMQ's ``sendLatencyFaultEnable``).
    not_available_ms
        The fault table's windows for ``LATENCY_MAX_MS`` (default: RocketMQ's, seed 003).
    route_refresh_s
        How long a topic's route is used before it is asked for again.
    clock
        Source of born timestamps and message-id seconds.
    credentials
        ``(access key, secret key)``: every call is signed (a broker with auth on).
    checker
        ``checker(CheckedMessage) -> Resolution`` (or ``"commit"`` / ``"rollback"``; anything
        else is UNKNOWN): answers the brokers' checks of pending transactions of
        ``transaction_topics`` over a Telemetry stream to each broker of their routes.
    transaction_topics
        The topics this producer sends transactions to and answers checks for.
    transaction_group
        Stamped on each half (user property ``TX_GROUP_PROPERTY``); the checker is only asked
        about halves with this producer's group. Default: this instance's own client id (it
        answers only for what it sent); give producer instances that may take over each
        other's transactions (a restart after a crash) the same stable name.
    """

    def __init__(
        self,
        target: str | Any,
        *,
        namespace: str = "",
        request_timeout_s: float = 3.0,
        retry_times_when_send_failed: int = 2,
        max_attempts: int | None = None,
        send_latency_fault_enable: bool = False,
        not_available_ms: Sequence[int] = NOT_AVAILABLE_MS,
        route_refresh_s: float = ROUTE_REFRESH_S,
        clock: Clock | None = None,
        credentials: tuple[str, str] | None = None,
        checker: Checker | None = None,
        transaction_topics: Sequence[str] = (),
        transaction_group: str | None = None,
    ) -> None:
        if max_attempts is None:
            max_attempts = 1 + retry_times_when_send_failed
        if max_attempts < 1:
            raise ValueError(f"retry_times_when_send_failed: must be >= 0, got {max_attempts - 1}")
        self._clock = clock or SystemClock()
        self._ids = MessageIdGenerator(self._clock)
        self._namespace = namespace
        self._timeout_s = request_timeout_s
        self._max_attempts = max_attempts
        self._embedded = None if isinstance(target, str) else target
        self._target = target if isinstance(target, str) else ""
        self._channel: grpc.Channel | None = None
        self._stub: Any = None
        client_id = f"rmq-spark-producer@{self._ids.next_id()}"
        self._sign = RequestSigner(credentials, self._clock)
        self._unsigned_metadata = client_metadata(client_id, namespace)
        faults = None
        if send_latency_fault_enable:
            faults = LatencyFaultTable(self._clock.monotonic_ms, not_available_ms=not_available_ms)
        self._chooser = QueueChooser(faults, start=time.monotonic_ns() % 1009)
        self._choose_lock = threading.Lock()
        self._routes: PublishRoutes | None = None
        if isinstance(target, str):
            self._channel, self._stub = messaging_channel(target)
            self._routes = PublishRoutes(
                self._stub,
                lambda: self._sign(self._unsigned_metadata),
                namespace=namespace,
                timeout_s=request_timeout_s,
                refresh_s=route_refresh_s,
                now_s=time.monotonic,
            )
        self._checks: CheckStreams | None = None
        if checker is not None:
            self._open_checks(checker, transaction_topics, transaction_group or client_id)

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
        return self._send_grpc(request, message_id, topic)

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

    def _send_grpc(self, request: Any, message_id: str, topic: str) -> SendReceipt:
        return self._send_grpc_at(request, message_id, topic)[0]

    def _send_grpc_at(self, request: Any, message_id: str, topic: str) -> tuple[SendReceipt, Any]:
        """The receipt and the stub of the broker that stored it."""
        assert self._routes is not None
        queues = self._routes.queues(topic)
        last_problem, last_broker = "", None
        for _attempt in range(self._max_attempts):
            broker, stub = self._pick(queues, last_broker)
            started_ms = self._clock.monotonic_ms()
            # The call's deadline runs on real time whatever clock the fault table keeps.
            started_s = time.monotonic()
            try:
                response = stub.SendMessage(
                    request, timeout=self._timeout_s, metadata=self._sign(self._unsigned_metadata)
                )
            except grpc.RpcError as err:
                code = failure_code(err, self._timeout_s, time.monotonic() - started_s)
                last_problem = f"gRPC {code.name if code else 'error'} from {broker}: {err}"
                self._note(broker, started_ms, failed=True)
                last_broker = broker
                if code in _RETRIED_GRPC_CODES:
                    continue
                raise BrokerError(f"send of {message_id} failed: {last_problem}") from err
            status = response.status
            if status.code == pb.OK:
                self._note(broker, started_ms, failed=False)
                entry = response.entries[0] if response.entries else None
                offset = entry.offset if entry is not None else -1
                tx_id = entry.transaction_id if entry is not None else ""
                return SendReceipt(message_id, offset, broker, tx_id), stub
            if status.code in _RETRIED_STATUS:
                last_problem = f"{pb.Code.Name(status.code)} from {broker}: {status.message}"
                self._note(broker, started_ms, failed=True)
                last_broker = broker
                continue
            raise _rejected(status.code, status.message, message_id)
        raise BrokerError(
            f"send of {message_id} failed after {self._max_attempts} attempts: {last_problem}"
        )

    def send_in_transaction(
        self,
        topic: str,
        body: bytes,
        *,
        tag: str | None = None,
        keys: tuple[str, ...] | list[str] = (),
        properties: Mapping[str, str] | None = None,
        message_id: str | None = None,
    ) -> Transaction:
        """Send a half message (invisible until committed); end it with the handle's
        ``commit()`` or ``rollback()``. Needs a gRPC target and a ``checker`` answering for
        ``topic`` (in ``transaction_topics``), as the official clients do."""
        if self._embedded is not None:
            raise ValueError("send_in_transaction: needs a broker's gRPC address")
        if self._checks is None or topic not in self._checks.topics:
            raise ValueError(
                f"send_in_transaction: topic {topic!r} needs a checker and must be in "
                "transaction_topics"
            )
        message_id = message_id or self._ids.next_id()
        stamped = {**(properties or {}), TX_GROUP_PROPERTY: self._checks.group}
        request = self._request(topic, body, tag, keys, stamped, None, None, message_id)
        request.messages[0].system_properties.message_type = pb.TRANSACTION
        receipt, stub = self._send_grpc_at(request, message_id, topic)

        def call(end: Any) -> Any:
            return stub.EndTransaction(
                end, timeout=self._timeout_s, metadata=self._sign(self._unsigned_metadata)
            )

        return Transaction(
            topic=topic, namespace=self._namespace, message_id=message_id,
            transaction_id=receipt.transaction_id, broker=receipt.broker, call=call,
        )  # fmt: skip

    def _open_checks(self, checker: Checker, topics: Sequence[str], group: str) -> None:
        """Telemetry streams declaring ``topics`` to each broker of their routes."""
        if self._embedded is not None:
            raise ValueError("checker: needs a broker's gRPC address")
        if not topics:
            raise ValueError("checker: transaction_topics must name at least one topic")
        if not group.strip():
            raise ValueError("transaction_group: must not be blank")
        self._checks = CheckStreams(
            topics=topics,
            group=group,
            namespace=self._namespace,
            checker=checker,
            metadata=lambda: self._sign(self._unsigned_metadata),
            timeout_s=self._timeout_s,
        )
        assert self._routes is not None
        endpoints = {q.endpoint for t in topics for q in self._routes.queues(t)}
        for endpoint in sorted(endpoints):
            self._checks.open(endpoint, self._routes.stub(endpoint))
        if not endpoints:
            self._checks.open(self._target, self._stub)

    def _pick(self, queues: tuple[RoutedQueue, ...], last_broker: str | None) -> tuple[str, Any]:
        """The broker (its name) and stub of the next attempt: the access point without a
        route."""
        if not queues:
            return self._target, self._stub
        assert self._routes is not None
        with self._choose_lock:
            queue = self._chooser.choose(queues, last_broker)
        return queue.broker_name, self._routes.stub(queue.endpoint)

    def _note(self, broker: str, started_ms: float, *, failed: bool) -> None:
        faults = self._chooser.faults
        if faults is None:
            return
        with self._choose_lock:
            faults.update(broker, self._clock.monotonic_ms() - started_ms, failed=failed)

    def close(self) -> None:
        """Close the gRPC channel (an embedded broker stays open: its owner closes it)."""
        if self._checks is not None:
            self._checks.close()
        if self._routes is not None:
            self._routes.close()
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
