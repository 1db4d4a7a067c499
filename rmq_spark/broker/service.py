"""The broker's logic: take a send in, place it, put it, answer it.

Owns ``BrokerService``, the decisions a RocketMQ 5 broker (proxy + broker) makes around a
producer's put: the topic/route table (``topics.py``), idempotence of retried sends, batches
(all or nothing where the wire says so), how a store refusal reaches the producer, the slave
wait of a SYNC_MASTER, redeliveries of the schedule job, and refusing work once a shutdown
began. Where a send goes (its checks, route, queue, record properties, the timer and half
topics) is ``placement.py``'s; the send's vocabulary (``SendCommand``, ``SendOutcome``,
``SendCode``) is ``send_model.py``'s and is re-exported here; the rules for one message
(validation, the properties a record carries, the timer transform) are ``send_rules.py``'s.

Does not own: protobuf or gRPC (``grpc_api.py`` translates), process lifecycle (``server.py``),
record encoding and durability (the store: a put is acknowledged only when the store says OK).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rmq_spark.broker.config import BrokerConfig, parse_topic_spec
from rmq_spark.broker.consumer import send_back as send_backs
from rmq_spark.broker.placement import Placement
from rmq_spark.broker.redelivery import REDELIVERY_REFUSED, RedeliveryRef
from rmq_spark.broker.redelivery_journal import (
    RedeliveredCopy,
    RedeliveryJournal,
    redeliver_once,
)
from rmq_spark.broker.send_model import (
    BORN_HOST,
    DELIVERY_MS_MAX,
    RESERVED_PROPERTY_KEYS,
    TRACE_CONTEXT,
    MessageKind,
    RouteOutcome,
    SendCode,
    SendCommand,
    SendOutcome,
    reject,
)
from rmq_spark.broker.send_outcomes import (
    confirmed,
    put_outcome,
    stopping,
    store_failure,
    stored_at,
)
from rmq_spark.broker.send_outcomes import end as record_end
from rmq_spark.broker.store_port import BrokerStore
from rmq_spark.broker.topics import CreationBudget, TopicTable
from rmq_spark.broker.traffic import TrafficStats
from rmq_spark.broker.transactions.service import TransactionService
from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import StoreError
from rmq_spark.store.delay_levels import parse_message_delay_level
from rmq_spark.store.put import PutRequest, PutResult, PutStatus

if TYPE_CHECKING:
    from rmq_spark.broker.replication.node import Replication

__all__ = [
    "BORN_HOST",
    "BrokerService",
    "DELIVERY_MS_MAX",
    "MessageKind",
    "RESERVED_PROPERTY_KEYS",
    "RouteOutcome",
    "SendCode",
    "SendCommand",
    "SendOutcome",
    "TRACE_CONTEXT",
]

log = logging.getLogger("rmq_spark.broker")


class BrokerService:
    """Puts producers' messages into a ``MessageStore``; thread-safe.

    Parameters
    ----------
    store
        The open store (``store_port.BrokerStore``). The service does not close it.
    config
        The broker section of the configuration.
    clock
        Used for delivery-time checks of delayed messages.
    max_message_size_bytes
        Largest body accepted: the store's ``StoreConfig.max_message_size_bytes`` (one knob
        for both, so the broker never accepts what the store would refuse).
    """

    def __init__(
        self,
        store: BrokerStore,
        config: BrokerConfig | None = None,
        *,
        clock: Clock | None = None,
        max_message_size_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self._store = store
        self._config = config or BrokerConfig()
        self._clock = clock or SystemClock()
        self.max_message_size_bytes = max_message_size_bytes
        self.topics = TopicTable(
            auto_create=self._config.auto_create_topics,
            default_queue_count=self._config.default_queue_count,
            budget=CreationBudget(
                self._config.auto_create_topics_per_s,
                self._config.auto_create_topics_burst,
                self._clock,
            ),
            initial=[
                parse_topic_spec(spec, self._config.default_queue_count)
                for spec in self._config.topics
            ],
        )
        # Delay levels past the last are refused (the store alone would clamp them silently).
        levels = parse_message_delay_level(store.config.message_delay_level)
        self._placement = Placement(
            self._config, self.topics, self._clock, max_message_size_bytes, len(levels)
        )
        self._send_backs: send_backs.SendBackPort | None = None  # the consume service's
        self._state_lock = threading.Condition()
        self._journal: RedeliveryJournal | None = None
        self._journal_lock = threading.Lock()
        self._shutting_down = False
        self._in_flight = 0
        self.traffic = TrafficStats()  # read by metrics.py at scrape time
        self.replication: Replication | None = None  # the role: a SLAVE refuses, SYNC waits
        self.transactions = TransactionService(store)  # EndTransaction and the check-back

    @property
    def config(self) -> BrokerConfig:
        return self._config

    # --- lifecycle ------------------------------------------------------------------------

    def begin_shutdown(self) -> None:
        """Refuse new sends from now on (``SHUTTING_DOWN``); sends in progress finish."""
        with self._state_lock:
            self._shutting_down = True
            self._state_lock.notify_all()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no send is in progress; ``False`` if ``timeout_s`` passed first."""
        with self._state_lock:
            return self._state_lock.wait_for(lambda: self._in_flight == 0, timeout=timeout_s)

    # --- routes ---------------------------------------------------------------------------

    def route(
        self, topic: str, namespace: str = "", *, reading: bool = False, client: str = ""
    ) -> RouteOutcome:
        """The queues of ``topic`` (see ``Placement.route``)."""
        return self._placement.route(topic, namespace, reading=reading, client=client)

    # --- the entry points: each front maps its wire calls to these -------------------------

    def send(self, command: SendCommand) -> SendOutcome:
        """Validate, place and store one message.

        Returns
        -------
        SendOutcome
            ``OK`` only once the store acknowledged the record (durable under the store's
            flush policy). A retried send (same topic and message id) returns the first
            outcome's position with ``duplicate=True`` and stores nothing new.
        """
        refused = self._enter(command.message_id)
        if refused is not None:
            return refused
        try:
            [placed] = self._placement.place_all((command,))
            if isinstance(placed, SendOutcome):
                return placed
            started = time.perf_counter()
            try:
                result = self._store.put(placed)
            except StoreError as err:
                return store_failure(err, command.message_id)
            outcome = self._stored(result, command.message_id, started)
            gate = self.replication
            return outcome if gate is None else gate.confirm(outcome, record_end(result))
        finally:
            self._leave()

    async def send_async(self, command: SendCommand) -> SendOutcome:
        """``send`` for a coroutine on an event loop: the same checks and the same
        acknowledgement, but the put joins the loop pass's store batch (``put_many_async``):
        under SYNC the coroutine awaits the fsync, no thread blocks per send."""
        return (await self.send_many_async((command,)))[0]

    async def send_many_async(self, commands: Sequence[SendCommand]) -> list[SendOutcome]:
        """``send_async`` of each command, in order, their puts joined to one batch and
        awaited together (the messages of the SendMessage calls of one relay read): each
        outcome is what ``send_async`` alone answers; a refusal, by the checks or by the
        store, refuses only its own message."""
        refused = self._enter_batch(commands)
        if refused is not None:
            return refused
        try:
            placed = self._placement.place_all(commands)
            requests = [p for p in placed if isinstance(p, PutRequest)]
            started = time.perf_counter()
            stored = iter(await self._store.put_many_async(requests) if requests else ())
            outcomes, results = [], []
            for command, put in zip(commands, placed, strict=True):
                if not isinstance(put, PutRequest):
                    outcomes.append(put)
                    continue
                result = next(stored)
                if isinstance(result, StoreError):
                    outcomes.append(store_failure(result, command.message_id))
                    continue
                results.append(result)
                outcomes.append(put_outcome(result, command.message_id))
            self.traffic.put_done(results, time.perf_counter() - started)
            return await self._confirm_batch_async(outcomes, results)
        finally:
            self._leave()

    def send_batch(self, commands: Sequence[SendCommand]) -> list[SendOutcome]:
        """``send`` of many messages with one store ``put_batch`` (one lock, one write, one
        fsync under SYNC), in order; the same checks and outcomes as ``send`` one by one,
        except that a refusal by the store itself (not by the checks) refuses the whole
        batch, as ``put_batch`` is all or nothing."""
        refused = self._enter_batch(commands)
        if refused is not None:
            return refused
        try:
            placed = self._placement.place_all(commands)
            requests = [p for p in placed if isinstance(p, PutRequest)]
            started = time.perf_counter()
            try:
                results = self._store.put_batch(requests) if requests else []
            except StoreError as err:
                return [store_failure(err, c.message_id) for c in commands]
            return self._confirm_batch(
                self._batch_outcomes(commands, placed, results, started), results
            )
        finally:
            self._leave()

    async def send_batch_async(self, commands: Sequence[SendCommand]) -> list[SendOutcome]:
        """``send_batch`` for a coroutine on an event loop, all or nothing from the checks on
        (RocketMQ's batch put): a message the checks refuse refuses every message of the batch
        and nothing is stored. The put (``put_batch_async``), its fsync and any slave report
        are awaited on the loop, no thread blocked per batch."""
        refused = self._enter_batch(commands)
        if refused is not None:
            return refused
        try:
            placed = self._placement.place_all(commands)
            index = next((i for i, p in enumerate(placed) if isinstance(p, SendOutcome)), None)
            if index is not None:
                return _batch_refused(commands, placed, index)
            requests = [p for p in placed if isinstance(p, PutRequest)]
            started = time.perf_counter()
            try:
                results = await self._store.put_batch_async(requests) if requests else []
            except StoreError as err:
                return [store_failure(err, c.message_id) for c in commands]
            outcomes = self._batch_outcomes(commands, placed, results, started)
            return await self._confirm_batch_async(outcomes, results)
        finally:
            self._leave()

    def send_back(
        self, group: str, record: send_backs.SendBackRecord
    ) -> PutResult | send_backs.Refused:
        """A consumer group's send-back of one record (``consumer/send_back.py``): its retry
        copy or dead letter. Who may name a record how is the front's gate's
        (``store_gate.py``); refused when the broker has no consume service."""
        port = self._send_backs
        if port is None:
            return send_backs.Refused("this broker serves no consumer groups")
        if self._role_refusal("") is not None:
            return send_backs.Refused("this broker is a SLAVE: send-backs go to its master")
        return send_backs.send_back(port, group, record)

    def redeliver(self, ref: RedeliveryRef | str, message_id: str) -> SendOutcome:
        """Put back a due schedule record of this store exactly as the in-process schedule
        job does (docs/DELAY.md, "Redelivery through a broker"), once: a second request for
        the same record answers the first copy's position. Every refusal is the same
        ``REDELIVERY_REFUSED`` (the reason is logged); ``ref`` is that reason when the front
        could not read the request. Puts synchronously: call it from a worker thread."""
        refused = self._enter(message_id)
        if refused is not None:
            return refused
        try:
            if isinstance(ref, str):
                return self._refuse_redelivery(ref, message_id)
            journal = self.redelivery_journal()
            try:
                found = redeliver_once(journal, self._store, ref, self._clock.now_ms())
            except StoreError as err:
                return store_failure(err, message_id)
            if isinstance(found, str):
                return self._refuse_redelivery(found, message_id)
            if isinstance(found, RedeliveredCopy):  # redelivered before: its first copy
                return stored_at(found, message_id, duplicate=True)
            self.traffic.put_done((found,), None)
            return put_outcome(found, message_id)
        finally:
            self._leave()

    def serve_send_backs(self, port: send_backs.SendBackPort) -> None:
        """Where ``send_back`` finds the groups (the consume service, once built)."""
        self._send_backs = port

    # --- one send, step by step ---------------------------------------------------------

    def _enter(self, message_id: str) -> SendOutcome | None:
        """Count a send in flight, or its refusal once a shutdown began (or by a SLAVE)."""
        refused = self._role_refusal(message_id)
        if refused is not None:
            return refused
        with self._state_lock:
            if self._shutting_down:
                return stopping(message_id)
            self._in_flight += 1
        return None

    def _enter_batch(self, commands: Sequence[SendCommand]) -> list[SendOutcome] | None:
        """``_enter`` for a batch: counted once, or every command's refusal."""
        with self._state_lock:
            if self._shutting_down:
                return [stopping(c.message_id) for c in commands]
            self._in_flight += 1
        refused = self._role_refusal(commands[0].message_id if commands else "")
        if refused is not None:
            self._leave()
            return [dataclasses.replace(refused, message_id=c.message_id) for c in commands]
        return None

    def _role_refusal(self, message_id: str) -> SendOutcome | None:
        gate = self.replication
        return None if gate is None else gate.refusal(message_id)

    def _batch_outcomes(
        self,
        commands: Sequence[SendCommand],
        placed: list[PutRequest | SendOutcome],
        results: list[PutResult],
        started: float,
    ) -> list[SendOutcome]:
        """Each command's outcome after a batch put: its refusal by the checks, or what the
        store answered its request."""
        self.traffic.put_done(results, time.perf_counter() - started)
        stored = iter(results)
        return [
            put_outcome(next(stored), c.message_id) if isinstance(p, PutRequest) else p
            for c, p in zip(commands, placed, strict=True)
        ]

    def _confirm_batch(
        self, outcomes: list[SendOutcome], results: list[PutResult]
    ) -> list[SendOutcome]:
        """SYNC_MASTER: one slave wait covers the whole batch (``replication/node.py``)."""
        gate, end = self.replication, _confirmable_end(results)
        if gate is None or end is None:
            return outcomes
        return confirmed(outcomes, gate.confirm(SendOutcome(SendCode.OK), end))

    async def _confirm_batch_async(
        self, outcomes: list[SendOutcome], results: list[PutResult]
    ) -> list[SendOutcome]:
        """``_confirm_batch`` awaited on the loop."""
        gate, end = self.replication, _confirmable_end(results)
        if gate is None or end is None:
            return outcomes
        return confirmed(outcomes, await gate.confirm_async(SendOutcome(SendCode.OK), end))

    def _leave(self) -> None:
        with self._state_lock:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._state_lock.notify_all()

    def _stored(self, result: PutResult, message_id: str, started: float) -> SendOutcome:
        self.traffic.put_done((result,), time.perf_counter() - started)
        return put_outcome(result, message_id)

    @staticmethod
    def _refuse_redelivery(reason: str, message_id: str) -> SendOutcome:
        log.info("broker: redelivery request %r refused: %s", message_id, reason)
        return reject(SendCode.BAD_REQUEST, REDELIVERY_REFUSED, message_id)

    @property
    def store_root(self) -> Path:
        """The store's root directory."""
        return Path(self._store.root_dir)

    @property
    def clock(self) -> Clock:
        return self._clock

    def redelivery_journal(self) -> RedeliveryJournal:
        """The journal of redeliveries (``<store>/config/redelivered.log``), opened once."""
        with self._journal_lock:
            if self._journal is None:
                root = Path(self._store.root_dir)
                self._journal = RedeliveryJournal.open(root / "config", self._store.min_offset)
            return self._journal

    def sync_redeliveries(self) -> None:
        """Make the journal lines of the redeliveries answered so far durable: call before
        replying to a request that redelivered."""
        if self._journal is not None:
            self._journal.sync()

    # --- the pieces -----------------------------------------------------------------------

    def validate(self, command: SendCommand) -> SendOutcome | None:
        """The broker's rules for one message, without storing it: ``None`` when it may be
        sent, else the refusal ``send`` would answer (the CLI's ``send`` applies them too)."""
        return self._placement.validate(command)


def _confirmable_end(results: list[PutResult]) -> int | None:
    """Where a batch's stored records end, for one slave wait over all of them (``None``:
    nothing was stored)."""
    ends = [record_end(r) for r in results if r.status is PutStatus.PUT_OK]
    return max(ends) if ends else None


def _batch_refused(
    commands: Sequence[SendCommand], placed: list[PutRequest | SendOutcome], index: int
) -> list[SendOutcome]:
    """Every message's refusal when message ``index`` of a batch was refused: its own, or
    the batch's, naming that message."""
    first = placed[index]
    assert isinstance(first, SendOutcome)
    reason = f"batch refused: message #{index}: {first.reason or first.code.name}"
    return [
        p if isinstance(p, SendOutcome) else reject(first.code, reason, c.message_id)
        for c, p in zip(commands, placed, strict=True)
    ]
