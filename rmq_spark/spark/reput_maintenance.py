"""Compaction of the reput tables beside the stream: OPTIMIZE in a thread of its own.

OPTIMIZE rewrites a table's small files into large clustered ones; run between two
micro-batches it stalled the stream for as long as it took (seconds, every
``optimize_interval_batches``), which set the job's worst put-to-visible latency. It only
rewrites files and changes no data, so Delta lets it commit next to the reput's blind appends
(tests/reput/test_reput_writer.py runs both at once): here it runs in the background, one run
at a time, and a batch never waits for it. Does not own what OPTIMIZE does (``tables.py``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rmq_spark.errors import TableError
from rmq_spark.spark.tables import optimize_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BackgroundOptimizer"]

log = logging.getLogger("rmq_spark.reput")


class BackgroundOptimizer:
    """Starts OPTIMIZE of the tables under ``tables_dir`` every ``interval_batches`` committed
    batches (0: never), unless the previous run is still going (it is then skipped)."""

    def __init__(self, spark: SparkSession, tables_dir: Path, interval_batches: int) -> None:
        self.spark = spark
        self.tables_dir = tables_dir
        self.interval_batches = interval_batches
        self.runs = 0
        self.failures = 0
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def batch_committed(self, batches_written: int) -> bool:
        """Called after each committed batch; True when it started a run."""
        interval = self.interval_batches
        if not interval or batches_written % interval or self.running:
            return False
        self._thread = threading.Thread(target=self._run, name="reput-optimize", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        started = time.monotonic()
        try:
            removed = optimize_tables(self.spark, self.tables_dir)
        except TableError as err:
            self.failures += 1
            log.warning("reput: OPTIMIZE failed (the next interval tries again): %s", err)
            return
        self.runs += 1
        log.info(
            "reput: OPTIMIZE removed %s small files in %.1f s (beside the stream)",
            json.dumps(removed),
            time.monotonic() - started,
        )

    def wait(self, timeout_s: float | None = None) -> None:
        """Let a run in progress finish (the job is ending)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
