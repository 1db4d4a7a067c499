"""The check-back of pending transactions (RocketMQ's ``TransactionalMessageCheckService``).

Owns the scan of the half queue: every ``transaction_check_interval_ms`` the halves from the
saved progress on are walked in order; one that is resolved (an op marker or a discard names
its transaction) or superseded (a later re-put of the same transaction follows it) is passed;
the first younger than ``transaction_timeout_ms`` (by its born time) ends the scan; one checked
``transaction_check_max`` times is copied to ``TRANS_CHECK_MAX_TIME_TOPIC`` and logged
(discarded); any other is re-put with TRANSACTION_CHECK_TIMES + 1 and the re-put is offered to
every producer stream that declared its topic (``RecoverOrphanedTransactionCommand``, whose
answer is an EndTransaction with the re-put's transaction id). The progress (the first half
offset not passed) is saved in ``<store>/config/transactionCheck.json`` after the re-puts are
stored, so a restart neither loses a check nor counts one twice (a re-put that outlived a
crash supersedes its original).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.transactions.check_wire import recover_command
from rmq_spark.broker.transactions.records import (
    HALF_QUEUE_ID,
    HalfRef,
    check_times,
    discard_request,
    renew_request,
    transaction_id,
)
from rmq_spark.broker.transactions.service import TransactionService, TxKey, key_of
from rmq_spark.broker.transactions.streams import ProducerStreams
from rmq_spark.clock import Clock
from rmq_spark.errors import StoreError
from rmq_spark.store.layout import RMQ_SYS_TRANS_HALF_TOPIC
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.put import PutRequest

__all__ = ["CheckReport", "TransactionCheck", "load_progress"]

log = logging.getLogger("rmq_spark.broker")

PROGRESS_FILE = Path("config") / "transactionCheck.json"
_BATCH = 256


@dataclass
class CheckReport:
    """What one scan did."""

    checked: int = 0  # re-put and offered to producers
    discarded: int = 0
    passed: int = 0  # resolved or superseded
    asked: int = 0  # check commands written to producer streams


def load_progress(root: Path) -> int:
    try:
        return int(json.loads((root / PROGRESS_FILE).read_text())["halfOffset"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _save_progress(root: Path, offset: int) -> None:
    path = root / PROGRESS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(".tmp")
    with temp.open("w", encoding="utf-8") as handle:
        json.dump({"halfOffset": offset}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


class TransactionCheck:
    """The check-back of one broker's store; ``run`` until ``shutdown``."""

    def __init__(
        self,
        transactions: TransactionService,
        streams: ProducerStreams,
        config: BrokerConfig,
        clock: Clock,
        root: Path,
    ) -> None:
        self._tx = transactions
        self._streams = streams
        self._config = config
        self._clock = clock
        self._root = root

    async def run(self, shutdown: asyncio.Event) -> None:
        interval_s = self._config.transaction_check_interval_ms / 1000
        try:
            self._tx.store.consume_queues  # noqa: B018 (the check reads the half queue)
        except StoreError as err:
            log.info("transaction check off: %s", err)
            return
        while not shutdown.is_set():
            try:
                await asyncio.wait_for(shutdown.wait(), interval_s)
                return
            except TimeoutError:
                pass
            try:
                await self.check_once()
            except StoreError as err:
                log.warning("transaction check: %s", err)
            except Exception as err:  # a bad record must not end the job
                log.error("transaction check failed: %s: %s", type(err).__name__, err)
                log.debug("details", exc_info=True)

    async def check_once(self) -> CheckReport:
        """One scan of the half queue (see the module docstring)."""
        report = CheckReport()
        self._tx.refresh()
        halves = self._pending_range()
        latest: dict[TxKey, int] = {key_of(h): h.queue_offset for h in halves}
        now_ms = self._clock.now_ms()
        timeout_ms, check_max = (
            self._config.transaction_timeout_ms,
            self._config.transaction_check_max,
        )
        progress = halves[0].queue_offset if halves else None
        renews: list[tuple[MessageRecord, PutRequest]] = []
        for half in halves:
            key = key_of(half)
            if self._tx.is_resolved(key) or latest[key] != half.queue_offset:
                report.passed += 1
            elif now_ms - half.born_timestamp_ms < timeout_ms:
                break
            elif check_times(half) >= check_max:
                await self._discard(half, key)
                report.discarded += 1
            else:
                renews.append((half, renew_request(half, check_times(half) + 1)))
            progress = half.queue_offset + 1
            if len(renews) >= _BATCH:
                await self._renew(renews, report)
                renews = []
                await asyncio.to_thread(_save_progress, self._root, progress)
        await self._renew(renews, report)
        if progress is not None:
            await asyncio.to_thread(_save_progress, self._root, progress)
        return report

    def _pending_range(self) -> list[MessageRecord]:
        store = self._tx.store
        queues = store.consume_queues
        start = max(load_progress(self._root), queues.min_offset(RMQ_SYS_TRANS_HALF_TOPIC, 0))
        end = queues.max_offset(RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID)
        halves = []
        while start < end:
            units = queues.units(RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID, start, end - start)
            if not units:
                break
            for unit in units:
                halves.append(store.read(unit.physical_offset))
            start += len(units)
        return halves

    async def _discard(self, half: MessageRecord, key: TxKey) -> None:
        result = await self._tx.store.put_async(discard_request(half))
        if not result.ok:
            raise StoreError(f"discard of {key[1]}: {result.status.name}: {result.detail}")
        self._tx.mark_resolved(key, discarded=True)
        log.warning(
            "transaction %s of topic %s discarded after %d checks (kept in %s)",
            key[1],
            key[0],
            check_times(half),
            result.topic,
        )

    async def _renew(
        self, renews: list[tuple[MessageRecord, PutRequest]], report: CheckReport
    ) -> None:
        if not renews:
            return
        store = self._tx.store
        results = await asyncio.to_thread(store.put_batch, [request for _, request in renews])
        for (half, request), result in zip(renews, results, strict=True):
            if not result.ok:
                raise StoreError(f"check re-put: {result.status.name}: {result.detail}")
            report.checked += 1
            renewed = HalfRef(result.physical_offset, result.queue_offset)
            report.asked += await self._ask(half, request, renewed)

    async def _ask(self, half: MessageRecord, request: PutRequest, renewed: HalfRef) -> int:
        """Offer the re-put half to every producer of its topic; how many were asked."""
        topic = key_of(half)[0]
        writers = self._streams.for_topic(topic)
        asked = 0
        for asker in self._tx.askers:  # 4.x producers of its group (remoting)
            asked += await asker.ask(half, renewed, request.raw_properties or "")
        if not writers and not asked:
            log.info(
                "transaction check: no producer of %s is connected (%d streams)",
                topic,
                len(self._streams),
            )
            return 0
        command = recover_command(half, request.raw_properties or "", renewed)
        command.recover_orphaned_transaction_command.transaction_id = transaction_id(renewed)
        for writer in writers:
            try:
                await writer.write(command)
                asked += 1
            except Exception as err:  # a stream that just ended
                log.debug("transaction check: a producer stream refused: %s", err)
        return asked
