"""The broker's end of the ``rmq-spark txcheck`` job (``broker.transaction_check = "job"``).

Owns ``CheckJobDesk``: the job names due halves (CommitLog and half-queue offsets); the broker
acts on each only if it is a half (its half-queue unit points at that CommitLog offset), the
latest copy of its transaction (``HalfIndex``: no later re-put of it) and unresolved, and
``check_plan.decide`` says it is due by the broker's clock and settings: then it renews it
(``TransactionCheck.renew``: re-put with TRANSACTION_CHECK_TIMES + 1, producers asked) or
discards it, else it answers NOTHING_TO_DO (already done, or never a half) or NOT_DUE. So a
job that crashed after the broker acted and before it saved its progress asks again and is
told "already done": no check is counted twice, none is lost. A re-put is in the half queue
(dispatched) before the answer, so a restarted job reading the files sees it.

Requests are handled one at a time (a crashed job's request may still run when its
successor's arrives). Who may call is ``security/store_gate.py``'s rule.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.transactions.check import (
    CheckReport,
    TransactionCheck,
    half_records,
    load_progress,
)
from rmq_spark.broker.transactions.check_plan import DISCARD, PASS, RENEW, decide, half_info
from rmq_spark.broker.transactions.records import HALF_QUEUE_ID
from rmq_spark.broker.transactions.service import TransactionService, TxKey, key_of
from rmq_spark.clock import Clock
from rmq_spark.errors import StoreError
from rmq_spark.store.layout import RMQ_SYS_TRANS_HALF_TOPIC
from rmq_spark.store.message import MessageRecord

__all__ = [
    "CHECKED",
    "CHECK_REFUSED",
    "CheckJobDesk",
    "DISCARDED",
    "HalfIndex",
    "JOB_PROGRESS_FILE",
    "JobOutcome",
    "NOTHING_TO_DO",
    "NOT_DUE",
]

log = logging.getLogger("rmq_spark.broker")

JOB_PROGRESS_FILE = Path("config") / "transactionCheckJob.json"
_DISPATCH_WAIT_S = 10.0
_PRUNE_MIN = 4096
CHECK_REFUSED = "TRANSACTION_CHECK_REFUSED"  # the one answer a caller without the right gets
CHECKED, DISCARDED, NOTHING_TO_DO, NOT_DUE = "CHECKED", "DISCARDED", "NOTHING_TO_DO", "NOT_DUE"


@dataclass(frozen=True, slots=True)
class JobOutcome:
    outcome: str  # CHECKED, DISCARDED, NOTHING_TO_DO, NOT_DUE
    asked: int = 0


class HalfIndex:
    """The latest half-queue offset of each unresolved transaction, read incrementally from
    ``start`` (below it nothing can be judged latest: such a half was handled already).
    Resolved transactions are dropped when the index has doubled since the last sweep."""

    def __init__(self, transactions: TransactionService, start: int) -> None:
        self._tx = transactions
        self.start = start
        self._read = start
        self._latest: dict[TxKey, int] = {}
        self._prune_at = _PRUNE_MIN

    def catch_up(self) -> None:
        for at, half in half_records(self._tx.store, self._read):
            if half is not None:
                self.saw(key_of(half), at)
            self._read = at + 1
        if len(self._latest) >= self._prune_at:  # amortised: resolved ones are never named
            for key in [k for k in self._latest if self._tx.is_resolved(k)]:
                del self._latest[key]
            self._prune_at = max(_PRUNE_MIN, 2 * len(self._latest))

    def saw(self, key: TxKey, queue_offset: int) -> None:
        self._latest[key] = max(queue_offset, self._latest.get(key, -1))

    def is_latest(self, key: TxKey, queue_offset: int) -> bool:
        return queue_offset >= self.start and self._latest.get(key) == queue_offset

    def forget(self, key: TxKey) -> None:
        """``key`` is resolved: it is never checked again."""
        self._latest.pop(key, None)


class CheckJobDesk:
    """Acts on the txcheck job's requests (module docstring)."""

    def __init__(
        self, check: TransactionCheck, transactions: TransactionService, config: BrokerConfig,
        clock: Clock, root: Path,
    ) -> None:  # fmt: skip
        self._check = check
        self._tx = transactions
        self._config = config
        self._clock = clock
        self._root = root
        self._index: HalfIndex | None = None
        self._lock = asyncio.Lock()

    @property
    def serving(self) -> bool:
        """Whether the job is in charge (else the broker checks and refuses the job)."""
        return self._config.transaction_check == "job"

    async def act(self, named: list[tuple[int, int]]) -> list[JobOutcome]:
        """One outcome per ``(physical offset, queue offset)`` named, in order."""
        async with self._lock:
            await self._wait_dispatched(named)
            self._tx.refresh()
            index = self._index_now()
            index.catch_up()
            now_ms = self._clock.now_ms()
            outcomes: list[JobOutcome] = []
            renews: list[tuple[int, MessageRecord]] = []
            acted: set[TxKey] = set()  # a transaction named twice in one request: once
            for physical_offset, queue_offset in named:
                half = self._half_at(physical_offset, queue_offset)
                key = key_of(half) if half is not None else None
                action = PASS if half is None or key in acted else self._decide(half, index, now_ms)
                if half is None or action == PASS:
                    outcomes.append(JobOutcome(NOTHING_TO_DO))
                elif action is None:
                    outcomes.append(JobOutcome(NOT_DUE))
                elif action == DISCARD:
                    await self._check.discard(half)
                    index.forget(key_of(half))
                    outcomes.append(JobOutcome(DISCARDED))
                else:
                    assert action == RENEW
                    renews.append((len(outcomes), half))
                    outcomes.append(JobOutcome(CHECKED))
                if key is not None:
                    acted.add(key)
            await self._renew(renews, outcomes, index)
        return outcomes

    async def _wait_dispatched(self, named: list[tuple[int, int]]) -> None:
        """Until the half queue holds the named records that are stored (Spark reads the
        CommitLog, so the job may see a half before its unit is there)."""
        end = int(getattr(self._tx.store, "max_offset", 0))
        stored = [physical_offset for physical_offset, _ in named if 0 <= physical_offset < end]
        if stored:
            queues = self._tx.store.consume_queues
            await asyncio.to_thread(queues.wait_dispatched, max(stored) + 1, _DISPATCH_WAIT_S)

    def _index_now(self) -> HalfIndex:
        if self._index is None:  # every half below both checkers' progress was handled
            start = min(load_progress(self._root), load_progress(self._root, JOB_PROGRESS_FILE))
            self._index = HalfIndex(self._tx, start)
        return self._index

    def _decide(self, half: MessageRecord, index: HalfIndex, now_ms: int) -> str | None:
        key = key_of(half)
        resolved = self._tx.is_resolved(key)
        if resolved:
            index.forget(key)
        done = resolved or not index.is_latest(key, half.queue_offset)
        config = self._config
        return decide(
            half_info(half), done, now_ms, config.transaction_timeout_ms,
            config.transaction_check_max,
        )  # fmt: skip

    def _half_at(self, physical_offset: int, queue_offset: int) -> MessageRecord | None:
        """The half the job names, if that is what the half queue holds there."""
        if physical_offset < 0 or queue_offset < 0:
            return None
        units = self._tx.store.consume_queues.units(
            RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID, queue_offset, 1
        )
        if not units or units[0].physical_offset != physical_offset:
            return None
        try:
            half = self._tx.store.read(physical_offset)
        except StoreError:
            return None
        if half.topic != RMQ_SYS_TRANS_HALF_TOPIC or half.queue_offset != queue_offset:
            return None
        return half

    async def _renew(
        self, renews: list[tuple[int, MessageRecord]], outcomes: list[JobOutcome], index: HalfIndex
    ) -> None:
        """Re-put and ask (one write), then wait until the re-puts are in the half queue."""
        if not renews:
            return
        renewed = await self._check.renew([half for _, half in renews], CheckReport())
        for (at, half), (ref, asked) in zip(renews, renewed, strict=True):
            index.saw(key_of(half), ref.queue_offset)
            outcomes[at] = JobOutcome(CHECKED, asked)
        queues = self._tx.store.consume_queues
        last = renewed[-1][0].physical_offset + 1
        await asyncio.to_thread(queues.wait_dispatched, last, _DISPATCH_WAIT_S)
