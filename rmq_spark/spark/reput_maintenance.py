"""Maintenance of the reput tables beside the stream: checkpoints and OPTIMIZE in a thread.

Two chores of a Delta table take seconds and used to sit in the stream's path: OPTIMIZE
(rewrites small files into large clustered ones), run between two micro-batches, and the
Delta checkpoint, written by the commit that reached the table's checkpoint interval. Either
stalled the stream for as long as it took and set the job's worst put-to-visible latency.
Neither changes data: OPTIMIZE commits next to the reput's blind appends (Delta's conflict
detection allows it; tests/reput/test_reput_writer.py runs both at once) and a checkpoint only
summarises committed versions. Here each runs in a thread of its own, one run of it at a time,
and a batch never waits for them; OPTIMIZE's thread runs it in a low-priority process of its
own (``optimize_process.py``). A checkpoint never waits for an OPTIMIZE either: a minutes-long
OPTIMIZE at the lowest priority used to skip every checkpoint due meanwhile, and each commit
then listed and replayed every log entry since the last one (seconds a batch at 2,000 msgs/s).
Does not own what they do (``tables.py``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import TableError
from rmq_spark.spark.optimize_process import (
    LOWEST_PRIORITY,
    PauseSwitch,
    optimize_in_own_process,
)
from rmq_spark.spark.reput_timeline import log_timeline
from rmq_spark.spark.tables import checkpoint_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rmq_spark.spark.reput_config import ReputConfig

__all__ = ["TableMaintenance"]

log = logging.getLogger("rmq_spark.reput")


class _Lane:
    """One chore in a thread of its own, one run at a time; a run asked for while one goes
    is skipped (the chore's next interval does it)."""

    def __init__(self, name: str, work: Callable[[], object], clock: Clock) -> None:
        self.name = name
        self.work = work
        self.clock = clock
        self.runs = 0
        self.failures = 0
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> bool:
        if self.running:
            return False
        self._thread = threading.Thread(target=self._run, name=f"reput-{self.name}", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        started, start_ms = time.monotonic(), self.clock.now_ms()
        try:
            self.work()
        except TableError as err:
            self.failures += 1
            log.warning("reput: %s failed (the next interval tries again): %s", self.name, err)
            return
        finally:
            log_timeline(
                "maintenance", chore=self.name, start_ms=start_ms, end_ms=self.clock.now_ms()
            )
        self.runs += 1
        log.info("reput: %s took %.1f s (beside the stream)", self.name, time.monotonic() - started)

    def wait(self, timeout_s: float | None) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)


class _OptimizeWindows:
    """When OPTIMIZE's process may run: not from just before each trigger of the stream until
    its batch is written (Spark starts a trigger at each multiple of the interval since the
    epoch), so that neither the batch's planning nor its work shares the CPU with it. With no
    batch for a whole interval (an idle stream, which runs no batch), it runs again."""

    MARGIN_MS = 20  # paused this long before the trigger is due

    def __init__(self, switch: PauseSwitch, trigger_interval_ms: int) -> None:
        self.switch = switch
        self.interval_ms = trigger_interval_ms  # 0: back-to-back batches (no windows)
        self._lock = threading.Lock()
        self._in_batch = False
        self._turn = 0  # a timer set before the latest batch start or end does nothing

    def batch_started(self) -> None:
        with self._lock:
            self._in_batch = True
            self._turn += 1
            self.switch.pause()

    def batch_ended(self, optimizing: bool) -> None:
        with self._lock:
            self._in_batch = False
            self._turn += 1
            self.switch.resume()
            if optimizing and self.interval_ms:
                now_ms = time.time() * 1000
                due_ms = (now_ms // self.interval_ms + 1) * self.interval_ms
                self._later((due_ms - self.MARGIN_MS - now_ms) / 1000, self._trigger_due)

    def _later(self, delay_s: float, action: Callable[[int], None]) -> None:
        timer = threading.Timer(max(delay_s, 0.0), action, args=(self._turn,))
        timer.daemon = True
        timer.start()

    def _trigger_due(self, turn: int) -> None:
        with self._lock:
            if turn == self._turn and not self._in_batch:
                self.switch.pause()
                self._later((self.interval_ms + self.MARGIN_MS) / 1000, self._no_batch)

    def _no_batch(self, turn: int) -> None:
        with self._lock:
            if turn == self._turn and not self._in_batch:
                self.switch.resume()

    def stop(self) -> None:
        with self._lock:
            self._turn += 1
            self.switch.resume()


class TableMaintenance:
    """After every ``checkpoint_interval`` committed batches a Delta checkpoint of the tables
    under ``tables_dir`` (then the removal of their log files older than ``log_retention_s``;
    ``None``: none), after every ``optimize_interval`` (0: never) an OPTIMIZE, each in a lane
    of its own; a chore due while its previous run still goes is skipped (the next interval
    does it)."""

    def __init__(
        self,
        spark: SparkSession,
        tables_dir: Path,
        *,
        optimize_interval: int,
        checkpoint_interval: int,
        optimize_niceness: int = LOWEST_PRIORITY,
        log_retention_s: float | None = None,
        trigger_interval_ms: int = 0,
        clock: Clock | None = None,
    ) -> None:
        self.spark = spark
        self.tables_dir = tables_dir
        self.optimize_interval = optimize_interval
        self.optimize_niceness = optimize_niceness
        self.checkpoint_interval = checkpoint_interval
        self.log_retention_s = log_retention_s
        # A table state rebuild beside the stream runs in one task: the other core stays
        # free for the batches (two tasks doubled the batches' time beside the JVM's
        # checkpoints and stalled rows up to 3.8 s, bench/peers/visible.py; one: 1.6 s).
        spark.conf.set("spark.databricks.delta.snapshotPartitions", "1")
        clock = clock or SystemClock()
        self._checkpoint_lane = _Lane("checkpoint", self._checkpoint, clock)
        self._optimize_lane = _Lane("OPTIMIZE", self._optimize, clock)
        self._lanes = (self._checkpoint_lane, self._optimize_lane)
        self._optimize_switch = PauseSwitch()
        self._windows = _OptimizeWindows(self._optimize_switch, trigger_interval_ms)

    @classmethod
    def for_job(
        cls, spark: SparkSession, config: ReputConfig, clock: Clock | None = None
    ) -> TableMaintenance:
        """The maintenance of a reput job's tables, as its ``[reput]`` settings say."""
        # An --available-now run waits for its OPTIMIZE at the end, with no stream left to
        # yield to: in the idle class it could starve there on a busy machine.
        return cls(
            spark,
            config.tables_dir,
            optimize_interval=config.optimize_interval_batches,
            optimize_niceness=0 if config.available_now else config.optimize_niceness,
            trigger_interval_ms=0 if config.available_now else config.trigger_interval_ms,
            checkpoint_interval=config.checkpoint_interval_batches,
            log_retention_s=config.log_retention_minutes * 60 or None,
            clock=clock,
        )

    @property
    def running(self) -> bool:
        return any(lane.running for lane in self._lanes)

    @property
    def chores(self) -> list[str]:
        """The chores running now, for the batches' timelines."""
        return [lane.name for lane in self._lanes if lane.running]

    @property
    def runs(self) -> int:
        return sum(lane.runs for lane in self._lanes)

    @property
    def failures(self) -> int:
        return sum(lane.failures for lane in self._lanes)

    def batch_committed(self, batches_written: int) -> bool:
        """Called after each committed batch; True when it started a run."""
        started = False
        if self.checkpoint_interval and batches_written % self.checkpoint_interval == 0:
            started |= self._checkpoint_lane.start()
        if self.optimize_interval and batches_written % self.optimize_interval == 0:
            started |= self._optimize_lane.start()
        return started

    def _checkpoint(self) -> None:
        checkpoint_tables(self.tables_dir, self.log_retention_s)

    def _optimize(self) -> None:
        jars = self.spark.conf.get("spark.jars", "") or ""
        try:
            removed = optimize_in_own_process(
                self.tables_dir,
                niceness=self.optimize_niceness,
                jars=jars,
                switch=self._optimize_switch,
            )
        except TableError:
            if not self._optimize_switch.ended:
                raise
            log.info("reput: OPTIMIZE ended with the job (nothing of it committed)")
            return
        log.info("reput: OPTIMIZE removed %s small files", json.dumps(removed))

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """OPTIMIZE's process stays paused while a batch is written, and from just before the
        next trigger (``_OptimizeWindows``)."""
        self._windows.batch_started()
        try:
            yield
        finally:
            self._windows.batch_ended(optimizing=self._optimize_lane.running)

    def resume_optimize(self) -> None:
        """Let a paused OPTIMIZE run on: a commit waits for the checksum of its version."""
        self._optimize_switch.resume()

    def wait(self, timeout_s: float | None = None, *, end_optimize: bool = False) -> None:
        """Let the runs in progress finish (the job is ending); ``end_optimize``: end an
        OPTIMIZE in progress instead (the job was told to stop: its OPTIMIZE, paused between
        batches, may have minutes to go)."""
        if end_optimize:
            self._optimize_switch.end()
        self._windows.stop()
        for lane in self._lanes:
            lane.wait(timeout_s)
