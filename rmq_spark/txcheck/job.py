"""The txcheck job: the broker's check-back run from outside it (docs/TRANSACTIONS.md).

Owns one pass (read the halves from the progress on, plan them with the broker's rule
``check_plan.plan_check``, ask the broker to act on the due ones a batch at a time, save the
progress after each batch's answers), the job's progress file
(``<store>/config/transactionCheckJob.json``, fsynced and renamed) and lock
(``config/txcheck.lock``), ``--once`` and the continuous loop (a pass every
``broker.transaction_check_interval_ms``), and the line each pass logs. ``run_txcheck`` is
what ``rmq-spark txcheck`` and ``jobs/txcheck.py`` call.

Exactly once: the broker acts on a named half only while it is the latest unresolved copy of
its transaction, so a pass repeated after a crash (progress not yet saved) is answered
NOTHING_TO_DO for what was done; a half the broker finds NOT_DUE (its clock or settings)
holds the progress there.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.transactions.check import load_progress, save_progress
from rmq_spark.broker.transactions.check_job import JOB_PROGRESS_FILE, NOT_DUE
from rmq_spark.broker.transactions.check_plan import PASS, Step, plan_check
from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import ConfigError, RmqError, StoreLockedError
from rmq_spark.txcheck.client import CheckClient, Outcome
from rmq_spark.txcheck.halves import FileHalves, HalfSource, SparkHalves

__all__ = ["LOCK_FILE", "PassReport", "TxCheckJob", "TxCheckSpec", "run_txcheck"]

log = logging.getLogger("rmq_spark.txcheck")

LOCK_FILE = Path("config") / "txcheck.lock"
_BATCH = 256  # halves per request (the broker re-puts them in one write)


@dataclass(frozen=True, slots=True)
class TxCheckSpec:
    """What ``rmq-spark txcheck`` / ``jobs/txcheck.py`` were asked to do."""

    store_dir: Path
    broker: str  # host:port of the broker serving store_dir
    once: bool = False
    interval_ms: int | None = None  # overrides broker.transaction_check_interval_ms
    finder: str = "files"  # files | spark: where the halves are read


@dataclass
class PassReport:
    checked: int = 0  # re-put by the broker and offered to producers
    discarded: int = 0
    passed: int = 0  # resolved, superseded, or already done
    asked: int = 0  # check commands the broker wrote to producers
    not_due: int = 0  # due by the job's clock, not by the broker's
    progress: int = 0  # the first half-queue offset not handled
    source: str = ""

    def add(self, other: PassReport) -> None:
        for name in ("checked", "discarded", "passed", "asked", "not_due"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.progress, self.source = other.progress, other.source

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class TxCheckJob:
    """Passes over one store's half queue; ``lock`` first (one job per store)."""

    def __init__(
        self, store_dir: Path, source: HalfSource, client: Any, config: BrokerConfig,
        clock: Clock, batch: int = _BATCH,
    ) -> None:  # fmt: skip
        self._root = store_dir
        self._source = source
        self._client = client  # CheckClient or anything with its check()
        self._config = config
        self._clock = clock
        self._batch = batch
        self._lock_fd: int | None = None

    def lock(self) -> None:
        """Raises ``StoreLockedError`` when another txcheck job runs on the store."""
        path = self._root / LOCK_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(f"{path}: another txcheck job runs on this store") from None
        self._lock_fd = fd

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        self._source.close()

    def progress(self) -> int:
        """Where a pass starts: every half below either checker's progress was handled."""
        return max(load_progress(self._root, JOB_PROGRESS_FILE), load_progress(self._root))

    def run_pass(self) -> PassReport:
        """One pass (module docstring). Raises ``BrokerError`` when the broker cannot be
        asked; the progress of the batches answered before is saved."""
        start = self.progress()
        found = self._source.read(start)
        config = self._config
        plan = plan_check(
            found.halves, found.is_resolved, self._clock.now_ms(),
            config.transaction_timeout_ms, config.transaction_check_max,
        )  # fmt: skip
        report = PassReport(progress=start, source=self._source.name)
        for chunk in self._chunks(plan.steps):
            due = [step.half for step in chunk if step.action != PASS]
            held = self._apply(chunk, self._client.check(due) if due else [], report)
            if report.progress != start:
                save_progress(self._root, report.progress, JOB_PROGRESS_FILE)
            if held:
                break
        return report

    def _chunks(self, steps: Sequence[Step]) -> list[Sequence[Step]]:
        chunks, begin, due = [], 0, 0
        for at, step in enumerate(steps):
            due += step.action != PASS
            if due >= self._batch:
                chunks.append(steps[begin : at + 1])
                begin, due = at + 1, 0
        if begin < len(steps):
            chunks.append(steps[begin:])
        return chunks

    @staticmethod
    def _apply(chunk: Sequence[Step], outcomes: list[Outcome], report: PassReport) -> bool:
        """Count the answers; the progress goes up to the first NOT_DUE (then True)."""
        answers = iter(outcomes)
        held = False
        for step in chunk:
            outcome = Outcome("NOTHING_TO_DO") if step.action == PASS else next(answers)
            if outcome.outcome == NOT_DUE:
                report.not_due += 1
                held = True
            elif outcome.outcome == "CHECKED":
                report.checked += 1
                report.asked += outcome.asked
            elif outcome.outcome == "DISCARDED":
                report.discarded += 1
            else:
                report.passed += 1
            if not held:
                report.progress = step.half.queue_offset + 1
        return held


def _log_pass(report: PassReport, error: str | None = None) -> None:
    doc = {**report.as_dict(), "error": error}
    level = logging.ERROR if error else logging.INFO
    log.log(level, "txcheck pass %s", json.dumps(doc, separators=(",", ":")))


def run_continuous(job: TxCheckJob, interval_ms: int, stop: threading.Event) -> None:
    """A pass every ``interval_ms`` until ``stop``; a failed pass is logged and retried."""
    while not stop.is_set():
        try:
            _log_pass(job.run_pass())
        except RmqError as err:
            _log_pass(PassReport(progress=job.progress()), str(err))
        stop.wait(interval_ms / 1000)


def run_txcheck(
    spec: TxCheckSpec,
    config: Any,
    *,
    spark_factory: Callable[[], Any] | None = None,
    clock: Clock | None = None,
    stop: threading.Event | None = None,
) -> int:
    """The whole job: lock, then one pass (``once``: printed as JSON) or passes until
    ``stop``. Raises ``RmqError`` (bad arguments, another job, the broker refused or down
    with ``once``)."""
    clock = clock or SystemClock()
    broker_config: BrokerConfig = getattr(config, "broker", None) or BrokerConfig()
    if not spec.store_dir.is_dir():
        raise ConfigError("--store", f"{spec.store_dir} is not a store directory")
    with ExitStack() as stack:
        source: HalfSource
        if spec.finder == "spark":
            if spark_factory is None:
                raise ConfigError("--finder", "spark needs a Spark session")
            source = SparkHalves(spark_factory(), spec.store_dir)
        else:
            source = FileHalves(spec.store_dir)
        client = CheckClient(spec.broker, spec.store_dir, clock=clock)
        stack.callback(client.close)
        job = TxCheckJob(spec.store_dir, source, client, broker_config, clock)
        job.lock()
        stack.callback(job.close)
        client.check([])  # is the broker there, and does it let the job check?
        if spec.once:
            report = job.run_pass()
            _log_pass(report)
            print(json.dumps({"txcheck": "once", **report.as_dict()}), flush=True)
            return 0
        interval = spec.interval_ms or broker_config.transaction_check_interval_ms
        log.info(
            "txcheck running on %s through %s (halves from %s, a pass every %d ms)",
            spec.store_dir, spec.broker, source.name, interval,
        )  # fmt: skip
        run_continuous(job, interval, stop or threading.Event())
    return 0
