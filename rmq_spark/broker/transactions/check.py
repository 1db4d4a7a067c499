"""The check-back of pending transactions (RocketMQ's ``TransactionalMessageCheckService``).

Owns running the scan inside the broker (``broker.transaction_check = "broker"``, the
default): every ``transaction_check_interval_ms`` the halves from the saved progress on are
read and ``check_plan.plan_check`` (the rule, shared with the ``rmq-spark txcheck`` job) says
which are passed, discarded (copied to ``TRANS_CHECK_MAX_TIME_TOPIC`` and logged) or renewed
(re-put with TRANSACTION_CHECK_TIMES + 1 and offered to every producer stream that declared
its topic: ``RecoverOrphanedTransactionCommand``, whose answer is an EndTransaction with the
re-put's transaction id, and to the 4.x producers of its group). The progress (the first half
offset not passed) is saved in ``<store>/config/transactionCheck.json`` after the re-puts are
stored, so a restart neither loses a check nor counts one twice (a re-put that outlived a
crash supersedes its original). With ``transaction_check = "job"`` the scan does not run here;
the job's requests reach ``discard`` / ``renew`` through ``check_job.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.transactions.check_plan import DISCARD, RENEW, half_info, plan_check
from rmq_spark.broker.transactions.check_wire import recover_command
from rmq_spark.broker.transactions.records import (
    HALF_QUEUE_ID,
    HalfRef,
    check_times,
    discard_request,
    renew_request,
    transaction_id,
)
from rmq_spark.broker.transactions.service import TransactionService, key_of
from rmq_spark.broker.transactions.streams import ProducerStreams
from rmq_spark.clock import Clock
from rmq_spark.errors import StoreError
from rmq_spark.store.layout import RMQ_SYS_TRANS_HALF_TOPIC
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.put import PutRequest

if TYPE_CHECKING:
    from rmq_spark.store.message_store import MessageStore

__all__ = [
    "CheckReport",
    "PROGRESS_FILE",
    "TransactionCheck",
    "half_records",
    "load_progress",
    "save_progress",
]

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


def half_records(store: MessageStore, start: int) -> Iterator[tuple[int, MessageRecord | None]]:
    """The half queue from queue offset ``start`` (or its first kept one) to its end as it is
    now: (queue offset, record), the record ``None`` when retention deleted it meanwhile."""
    queues = store.consume_queues
    start = max(start, queues.min_offset(RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID))
    end = queues.max_offset(RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID)
    while start < end:
        units = queues.units(RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID, start, end - start)
        if not units:
            return
        for at, unit in enumerate(units, start):
            try:
                yield at, store.read(unit.physical_offset)
            except StoreError:
                yield at, None
        start += len(units)


def load_progress(root: Path, name: Path = PROGRESS_FILE) -> int:
    """The first half queue offset a check has not handled (0: none saved)."""
    try:
        return int(json.loads((root / name).read_text())["halfOffset"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def save_progress(root: Path, offset: int, name: Path = PROGRESS_FILE) -> None:
    """Write the progress durably: temp file, fsync, rename."""
    path = root / name
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
        if self._config.transaction_check != "broker":
            log.info("transaction check: run by the txcheck job (broker.transaction_check)")
            return
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
        halves = {h.physical_offset: h for h in self._pending_range()}
        plan = plan_check(
            [half_info(h) for h in halves.values()],
            self._tx.is_resolved,
            self._clock.now_ms(),
            self._config.transaction_timeout_ms,
            self._config.transaction_check_max,
        )
        renews: list[MessageRecord] = []
        for step in plan.steps:
            half = halves[step.half.physical_offset]
            if step.action == DISCARD:
                await self.discard(half)
                report.discarded += 1
            elif step.action == RENEW:
                renews.append(half)
            else:
                report.passed += 1
            if len(renews) >= _BATCH:
                await self.renew(renews, report)
                renews = []
                await asyncio.to_thread(save_progress, self._root, step.half.queue_offset + 1)
        await self.renew(renews, report)
        if plan.progress is not None:
            await asyncio.to_thread(save_progress, self._root, plan.progress)
        return report

    def _pending_range(self) -> list[MessageRecord]:
        found = half_records(self._tx.store, load_progress(self._root))
        return [half for _, half in found if half is not None]

    async def discard(self, half: MessageRecord) -> None:
        """Copy ``half`` to the discard topic and count its transaction resolved."""
        key = key_of(half)
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

    async def renew(
        self, halves: list[MessageRecord], report: CheckReport
    ) -> list[tuple[HalfRef, int]]:
        """Re-put ``halves`` with TRANSACTION_CHECK_TIMES + 1 (one write) and offer each
        re-put to its producers; where each re-put is and how many producers were asked."""
        if not halves:
            return []
        requests = [renew_request(half, check_times(half) + 1) for half in halves]
        results = await asyncio.to_thread(self._tx.store.put_batch, requests)
        renewed = []
        for half, request, result in zip(halves, requests, results, strict=True):
            if not result.ok:
                raise StoreError(f"check re-put: {result.status.name}: {result.detail}")
            report.checked += 1
            ref = HalfRef(result.physical_offset, result.queue_offset)
            asked = await self._ask(half, request, ref)
            report.asked += asked
            renewed.append((ref, asked))
        return renewed

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
