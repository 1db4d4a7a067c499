"""Transactions of the thin ``Producer``: the half's handle and the checker's Telemetry stream.

Owns ``Transaction`` (a half message sent with ``Producer.send_in_transaction``; ``commit()``
or ``rollback()`` sends EndTransaction to the broker that stored it) and ``CheckStreams``
(one Telemetry stream per broker of the transaction topics' routes, declaring those topics as
a producer's settings, so the broker's check-back can ask; a ``RecoverOrphanedTransactionCommand``
is answered with the checker's resolution as EndTransaction, ``SOURCE_SERVER_CHECK``). The
checker is only asked about halves this producer's transaction group sent (the user property
``TX_GROUP_PROPERTY`` every half carries) to a topic it declared: the broker offers a half to
every producer of its topic, and a checker that does not know another application's
transaction must not roll it back; any other command is left unanswered (another producer's).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.transactions.service import Resolution
from rmq_spark.errors import BrokerError, SendRejectedError

__all__ = [
    "CheckStreams",
    "CheckedMessage",
    "Resolution",
    "TX_GROUP_PROPERTY",
    "Transaction",
    "TransactionEndedError",
]

log = logging.getLogger("rmq_spark.broker.cluster")

TX_GROUP_PROPERTY = "rmqSparkTxGroup"
_WIRE = {Resolution.COMMIT: pb.COMMIT, Resolution.ROLLBACK: pb.ROLLBACK}
_RECONNECT_S = 1.0


class TransactionEndedError(ValueError):
    """``commit()`` / ``rollback()`` of a transaction this handle already ended."""


@dataclasses.dataclass(frozen=True, slots=True)
class CheckedMessage:
    """A half message the broker asks the checker about."""

    topic: str
    body: bytes
    message_id: str
    transaction_id: str
    tag: str
    keys: tuple[str, ...]
    properties: dict[str, str]


def end_request(
    topic: str, namespace: str, message_id: str, tx_id: str, resolution: Resolution, source: int
) -> Any:
    request = spb.EndTransactionRequest(
        message_id=message_id,
        transaction_id=tx_id,
        resolution=_WIRE.get(resolution, pb.TRANSACTION_RESOLUTION_UNSPECIFIED),
        source=source,
    )
    request.topic.name = topic
    request.topic.resource_namespace = namespace
    return request


class Transaction:
    """One half message; end it once with ``commit()`` or ``rollback()``."""

    def __init__(
        self,
        *,
        topic: str,
        namespace: str,
        message_id: str,
        transaction_id: str,
        broker: str,
        call: Callable[[Any], Any],
    ) -> None:
        self.topic = topic
        self.message_id = message_id
        self.transaction_id = transaction_id
        self.broker = broker
        self._namespace = namespace
        self._call = call
        self._ended: Resolution | None = None
        self._lock = threading.Lock()

    @property
    def ended(self) -> Resolution | None:
        """``COMMIT`` / ``ROLLBACK`` once ended, else ``None``."""
        return self._ended

    def commit(self) -> None:
        """Make the message visible to consumers (once)."""
        self._end(Resolution.COMMIT)

    def rollback(self) -> None:
        """Drop the message (once)."""
        self._end(Resolution.ROLLBACK)

    def _end(self, resolution: Resolution) -> None:
        with self._lock:
            if self._ended is not None:
                raise TransactionEndedError(
                    f"transaction {self.message_id} already ended ({self._ended.name})"
                )
            request = end_request(
                self.topic, self._namespace, self.message_id, self.transaction_id,
                resolution, pb.SOURCE_CLIENT,
            )  # fmt: skip
            try:
                response = self._call(request)
            except grpc.RpcError as err:
                raise BrokerError(f"end of transaction {self.message_id}: {err}") from err
            code = response.status.code
            if code != pb.OK:
                name = pb.Code.Name(code) if code in pb.Code.values() else str(code)
                raise SendRejectedError(code, name, response.status.message, self.message_id)
            self._ended = resolution


Checker = Callable[[CheckedMessage], Any]


def _resolution_of(answer: Any) -> Resolution:
    if isinstance(answer, Resolution):
        return answer
    if isinstance(answer, str) and answer.upper() in Resolution.__members__:
        return Resolution[answer.upper()]
    return Resolution.UNKNOWN


def checked_message(command: Any) -> CheckedMessage:
    message = command.message
    sp = message.system_properties
    return CheckedMessage(
        topic=message.topic.name,
        body=bytes(message.body),
        message_id=sp.message_id,
        transaction_id=command.transaction_id,
        tag=sp.tag,
        keys=tuple(sp.keys),
        properties=dict(message.user_properties),
    )


class CheckStreams:
    """Telemetry streams to brokers, answering their transaction checks with ``checker``."""

    def __init__(
        self,
        *,
        topics: Sequence[str],
        group: str,
        namespace: str,
        checker: Checker,
        metadata: Callable[[], Any],
        timeout_s: float,
    ) -> None:
        self.topics = tuple(topics)
        self.group = group
        self._namespace = namespace
        self._checker = checker
        self._metadata = metadata
        self._timeout_s = timeout_s
        self._closed = threading.Event()
        self._threads: dict[str, threading.Thread] = {}
        self._calls: dict[str, Any] = {}
        self.answered = 0  # EndTransactions sent for checks (tests)

    def open(self, endpoint: str, stub: Any) -> None:
        """Keep a stream to ``endpoint`` open until ``close`` (reconnecting after a drop)."""
        if endpoint in self._threads or self._closed.is_set():
            return
        thread = threading.Thread(
            target=self._run, args=(endpoint, stub), name=f"tx-check-{endpoint}", daemon=True
        )
        self._threads[endpoint] = thread
        thread.start()

    def _settings(self) -> Any:
        settings = pb.Settings(client_type=pb.PRODUCER)
        for topic in self.topics:
            resource = settings.publishing.topics.add()
            resource.name = topic
            resource.resource_namespace = self._namespace
        settings.request_timeout.FromMilliseconds(int(self._timeout_s * 1000))
        return spb.TelemetryCommand(settings=settings)

    def _requests(self, done: threading.Event) -> Iterator[Any]:
        yield self._settings()
        while not (done.is_set() or self._closed.wait(0.5)):
            pass

    def _run(self, endpoint: str, stub: Any) -> None:
        while not self._closed.is_set():
            done = threading.Event()
            try:
                call = stub.Telemetry(self._requests(done), metadata=self._metadata())
                self._calls[endpoint] = call
                for command in call:
                    if command.WhichOneof("command") == "recover_orphaned_transaction_command":
                        self._answer(stub, command.recover_orphaned_transaction_command)
                    elif command.HasField("status") and command.status.code != pb.OK:
                        # e.g. no Pub right on a declared topic: the broker will not ask
                        log.warning(
                            "transaction checks of %s refused by %s: %s",
                            ",".join(self.topics), endpoint, command.status.message,
                        )  # fmt: skip
            except grpc.RpcError as err:
                if not self._closed.is_set():
                    log.info("transaction check stream to %s: %s", endpoint, err)
            finally:
                done.set()
            self._closed.wait(_RECONNECT_S)

    def _answer(self, stub: Any, command: Any) -> None:
        message = checked_message(command)
        if message.topic not in self.topics:
            log.warning("transaction check of undeclared topic %r ignored", message.topic)
            return
        if message.properties.get(TX_GROUP_PROPERTY) != self.group:
            log.debug("transaction %s is another producer's: not answered", message.message_id)
            return
        try:
            resolution = _resolution_of(self._checker(message))
        except Exception as err:  # a failing checker leaves the transaction pending
            log.warning("transaction checker failed on %s: %s", message.message_id, err)
            resolution = Resolution.UNKNOWN
        request = end_request(
            message.topic, self._namespace, message.message_id, message.transaction_id,
            resolution, pb.SOURCE_SERVER_CHECK,
        )  # fmt: skip
        try:
            stub.EndTransaction(request, timeout=self._timeout_s, metadata=self._metadata())
            self.answered += 1
        except grpc.RpcError as err:
            log.info("transaction check answer for %s failed: %s", message.message_id, err)

    def close(self) -> None:
        self._closed.set()
        for call in list(self._calls.values()):
            call.cancel()
        for thread in self._threads.values():
            thread.join(timeout=5)
