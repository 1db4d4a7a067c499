"""Maintenance of the reput tables beside the stream: checkpoints and OPTIMIZE in a thread.

Two chores of a Delta table take seconds and used to sit in the stream's path: OPTIMIZE
(rewrites small files into large clustered ones), run between two micro-batches, and the
Delta checkpoint, written by the commit that reached the table's checkpoint interval. Either
stalled the stream for as long as it took and set the job's worst put-to-visible latency.
Neither changes data: OPTIMIZE commits next to the reput's blind appends (Delta's conflict
detection allows it; tests/reput/test_reput_writer.py runs both at once) and a checkpoint only
summarises committed versions. Here they run in a thread of their own, one run at a time, and
a batch never waits for them. Does not own what they do (``tables.py``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import TableError
from rmq_spark.spark.reput_timeline import log_timeline
from rmq_spark.spark.tables import checkpoint_tables, optimize_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["TableMaintenance"]

log = logging.getLogger("rmq_spark.reput")


class TableMaintenance:
    """After every ``checkpoint_interval`` committed batches a Delta checkpoint of the tables
    under ``tables_dir``, after every ``optimize_interval`` (0: never) an OPTIMIZE; a chore
    due while the previous run still goes is skipped (the next interval does it)."""

    def __init__(
        self,
        spark: SparkSession,
        tables_dir: Path,
        *,
        optimize_interval: int,
        checkpoint_interval: int,
        clock: Clock | None = None,
    ) -> None:
        self.spark = spark
        self.clock = clock or SystemClock()
        self.chore = ""  # the chore running now ("": none), for the batches' timelines
        self.tables_dir = tables_dir
        self.optimize_interval = optimize_interval
        self.checkpoint_interval = checkpoint_interval
        # A table state rebuild beside the stream (OPTIMIZE's) runs in one task: the other
        # core stays free for the batches (two tasks doubled the batches' time beside the
        # JVM's checkpoints and stalled rows up to 3.8 s, bench/peers/visible.py; one: 1.6 s).
        spark.conf.set("spark.databricks.delta.snapshotPartitions", "1")
        self.runs = 0
        self.failures = 0
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _due(self, batches: int) -> list[tuple[str, Callable[[], object]]]:
        chores: list[tuple[str, Callable[[], object]]] = []
        if self.checkpoint_interval and batches % self.checkpoint_interval == 0:
            chores.append(("checkpoint", self._checkpoint))
        if self.optimize_interval and batches % self.optimize_interval == 0:
            chores.append(("OPTIMIZE", self._optimize))
        return chores

    def batch_committed(self, batches_written: int) -> bool:
        """Called after each committed batch; True when it started a run."""
        chores = self._due(batches_written)
        if not chores or self.running:
            return False
        self._start(chores)
        return True

    def _start(self, chores: list[tuple[str, Callable[[], object]]]) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(chores,), name="reput-maintenance", daemon=True
        )
        self._thread.start()

    def _checkpoint(self) -> None:
        checkpoint_tables(self.tables_dir)

    def _optimize(self) -> None:
        # One rewrite task at a time: the other cores stay free for the batches.
        self.spark.conf.set("spark.databricks.delta.optimize.maxThreads", "1")
        removed = optimize_tables(self.spark, self.tables_dir)
        log.info("reput: OPTIMIZE removed %s small files", json.dumps(removed))

    def _run(self, chores: list[tuple[str, Callable[[], object]]]) -> None:
        for name, chore in chores:
            started, start_ms = time.monotonic(), self.clock.now_ms()
            self.chore = name
            try:
                chore()
            except TableError as err:
                self.failures += 1
                log.warning("reput: %s failed (the next interval tries again): %s", name, err)
                continue
            finally:
                self.chore = ""
                log_timeline(
                    "maintenance", chore=name, start_ms=start_ms, end_ms=self.clock.now_ms()
                )
            self.runs += 1
            log.info("reput: %s took %.1f s (beside the stream)", name, time.monotonic() - started)

    def wait(self, timeout_s: float | None = None) -> None:
        """Let a run in progress finish (the job is ending)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
