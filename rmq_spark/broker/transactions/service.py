"""Ending transactions: EndTransaction's commit and rollback, once, whoever asks.

Owns ``TransactionService``: finding the half message a transaction id names (its unit in the
half queue must point at the CommitLog offset the id carries, and the record must be a half
of the caller's topic and producer group), writing the committed copy and the op marker
(EndTransactionProcessor), and which transactions are resolved. A transaction is resolved when
an op marker names its half (or a copy of it, re-put by a check) or it was discarded; that set
is rebuilt from the op queue and the discard queue, so a duplicate or late EndTransaction
writes nothing, also after a restart. Runs on the broker's event loop (the gRPC handlers and
the check-back call it there); the puts are awaited (``put_async``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rmq_spark.broker.store_port import BrokerStore
from rmq_spark.broker.transactions.records import (
    DISCARD_TOPIC,
    HALF_QUEUE_ID,
    HalfRef,
    commit_request,
    op_offsets,
    op_request,
    parse_transaction_id,
)
from rmq_spark.errors import StoreError
from rmq_spark.store.layout import RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.properties import PRODUCER_GROUP, REAL_TOPIC, UNIQ_KEY, parse_properties
from rmq_spark.store.put import PutRequest, PutResult

__all__ = [
    "Asker",
    "EndOutcome",
    "EndStatus",
    "Resolution",
    "TransactionService",
    "TxKey",
    "key_of",
]

log = logging.getLogger("rmq_spark.broker")

TxKey = tuple[str, str]
"""A transaction: (real topic, UNIQ_KEY); the same for a half and its check re-puts."""

_DISPATCH_WAIT_S = 5.0


class Resolution(enum.Enum):
    """What a producer decided (``apache.rocketmq.v2.TransactionResolution``)."""

    UNKNOWN = 0
    COMMIT = 1
    ROLLBACK = 2


class EndStatus(enum.Enum):
    OK = "OK"
    NOT_FOUND = "NOT_FOUND"  # no half of this caller matches the id (the proxy's answer)
    FAILED = "FAILED"  # a put failed; the transaction stays pending


@dataclass(frozen=True, slots=True)
class EndOutcome:
    status: EndStatus
    reason: str = ""
    written: bool = False  # False: nothing stored (duplicate, unknown resolution)


def key_of(record: MessageRecord) -> TxKey:
    props = parse_properties(record.properties)
    return props.get(REAL_TOPIC, ""), props.get(UNIQ_KEY, "")


class Asker(Protocol):
    """A front that can ask producers about a half (the remoting front's
    CHECK_TRANSACTION_STATE); the gRPC front's streams are the check's own."""

    async def ask(self, half: MessageRecord, renewed: Any, properties: str) -> int:
        """Ask the producers of ``half``'s group about its re-put at ``renewed`` (a
        ``HalfRef``) with ``properties``; how many were asked."""
        ...


class TransactionService:
    """Transactions of one store; see the module docstring."""

    def __init__(self, store: BrokerStore) -> None:
        self._store = store
        self.askers: list[Asker] = []  # fronts that register producers (remoting)
        self._resolved: set[TxKey] = set()
        self.discarded: set[TxKey] = set()  # of the resolved: those a check gave up on
        self._read = {RMQ_SYS_TRANS_OP_HALF_TOPIC: 0, DISCARD_TOPIC: 0}
        self._busy: dict[TxKey, asyncio.Lock] = {}
        self.written = 0  # committed copies and op markers stored (tests, metrics)

    @property
    def store(self) -> BrokerStore:
        return self._store

    # --- what is resolved ---------------------------------------------------------------

    def is_resolved(self, key: TxKey) -> bool:
        self.refresh()
        return key in self._resolved

    def mark_resolved(self, key: TxKey, *, discarded: bool = False) -> None:
        self._resolved.add(key)
        if discarded:
            self.discarded.add(key)

    def refresh(self) -> None:
        """Read the op and discard markers stored since the last call."""
        queues = self._store.consume_queues
        for topic in (RMQ_SYS_TRANS_OP_HALF_TOPIC, DISCARD_TOPIC):
            end = queues.max_offset(topic, HALF_QUEUE_ID)
            start = max(self._read[topic], queues.min_offset(topic, HALF_QUEUE_ID))
            while start < end:
                units = queues.units(topic, HALF_QUEUE_ID, start, min(256, end - start))
                if not units:
                    break
                for unit in units:
                    self._learn(topic, unit.physical_offset)
                start += len(units)
            self._read[topic] = start

    def _learn(self, topic: str, physical_offset: int) -> None:
        try:
            record = self._store.read(physical_offset)
        except StoreError:
            return  # deleted by retention meanwhile
        if topic == DISCARD_TOPIC:
            self._resolved.add(key_of(record))
            self.discarded.add(key_of(record))
            return
        for half_offset in op_offsets(record.body):
            half = self.half_at_queue_offset(half_offset)
            if half is not None:
                self._resolved.add(key_of(half))

    def half_at_queue_offset(self, queue_offset: int) -> MessageRecord | None:
        units = self._store.consume_queues.units(
            RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID, queue_offset, 1
        )
        if not units:
            return None
        try:
            return self._store.read(units[0].physical_offset)
        except StoreError:
            return None

    # --- EndTransaction -----------------------------------------------------------------

    async def find_half(
        self, transaction_id: str, topic: str | None, group: str
    ) -> MessageRecord | None:
        """The half ``transaction_id`` names, if it is one of ``topic`` (``None``: any; the
        caller checks its rights on the half's topic) sent by ``group``."""
        ref = parse_transaction_id(transaction_id)
        if ref is None:
            return None
        if not self._unit_points_at(ref):
            target = ref.physical_offset + 1
            queues = self._store.consume_queues
            await asyncio.to_thread(queues.wait_dispatched, target, _DISPATCH_WAIT_S)
            if not self._unit_points_at(ref):
                return None
        try:
            half = self._store.read(ref.physical_offset)
        except StoreError:
            return None
        props = parse_properties(half.properties)
        if (
            half.topic != RMQ_SYS_TRANS_HALF_TOPIC
            or half.queue_offset != ref.queue_offset
            or (topic is not None and props.get(REAL_TOPIC) != topic)
            or props.get(PRODUCER_GROUP) != group
        ):
            return None
        return half

    def _unit_points_at(self, ref: HalfRef) -> bool:
        units = self._store.consume_queues.units(
            RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID, ref.queue_offset, 1
        )
        return bool(units) and units[0].physical_offset == ref.physical_offset

    async def end(
        self,
        *,
        topic: str | None,
        group: str,
        message_id: str,
        transaction_id: str,
        resolution: Resolution,
        may_publish: Callable[[str], bool] | None = None,
    ) -> EndOutcome:
        """Commit or roll back the transaction ``transaction_id`` of ``topic`` (``None``: of
        a topic ``may_publish`` allows); a duplicate or an UNKNOWN resolution stores nothing
        and answers OK."""
        half = await self.find_half(transaction_id, topic, group)
        if half is None or (message_id and key_of(half)[1] != message_id):
            return EndOutcome(EndStatus.NOT_FOUND, "cannot found transaction data")
        if may_publish is not None and not may_publish(key_of(half)[0]):
            return EndOutcome(EndStatus.NOT_FOUND, "cannot found transaction data")
        if resolution is Resolution.UNKNOWN:
            return EndOutcome(EndStatus.OK)
        key = key_of(half)
        lock = self._busy.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                if self.is_resolved(key):
                    return EndOutcome(EndStatus.OK)
                return await self._resolve(half, key, resolution)
        finally:
            if not lock.locked() and self._busy.get(key) is lock:
                del self._busy[key]

    async def _resolve(self, half: MessageRecord, key: TxKey, resolution: Resolution) -> EndOutcome:
        if resolution is Resolution.COMMIT:
            failed = await self._put(commit_request(half))
            if failed:
                return EndOutcome(EndStatus.FAILED, f"commit of {key[1]}: {failed}")
        failed = await self._put(op_request(half.queue_offset, half.store_host))
        if failed:
            return EndOutcome(EndStatus.FAILED, f"op marker of {key[1]}: {failed}")
        self._resolved.add(key)
        log.debug("transaction %s of %s: %s", key[1], key[0], resolution.name)
        return EndOutcome(EndStatus.OK, written=True)

    async def _put(self, request: PutRequest) -> str:
        """Store ``request``; ``""`` on success, else why not."""
        try:
            result: PutResult = await self._store.put_async(request)
        except StoreError as err:
            return str(err)
        if not result.ok:
            return f"{result.status.name}: {result.detail}"
        self.written += 1
        return ""
