"""The reput job over several stores: one query, one ``ReputBatchWriter`` per store.

What a cluster of brokers looks like to the tables: the stream reads every store in one
query (``load("s1,s2")``, ``multi_store.py``; its offset is ``{"stores": {path: offset}}``),
and each micro-batch is, per store, the one-store batch of that store's log range, written
by that store's writer. Each writer keeps what makes a one-store reput exactly once, per
store: its Delta txn app id is ``<txn_app_id>:<store>`` with the store's log position as
txn version, its floors are its own rows' and it publishes its progress into its own store
(retention there waits for it). So a replayed batch adds nothing for the stores it already
committed and the rest for the others; a restart resumes each store from its own offset.
Rows carry the ``store`` column (the store's absolute path). Stores are written one after
the other within a batch (each write is already a parallel Spark job). Does not own the
one-store writer (``reput_writer.py``), the tables (``tables.py``) nor the source.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rmq_spark.clock import Clock, SystemClock
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.reput_maintenance import TableMaintenance
from rmq_spark.spark.reput_start import logged_store_ranges
from rmq_spark.spark.reput_writer import BatchReport, ReputBatchWriter
from rmq_spark.spark.tables import STORE_COLUMN, StoreOfSeveral

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["MultiStoreReputWriter"]


def _batch_ranges(batch: DataFrame) -> dict[str, tuple[int, int]]:
    """``{store: (first physical offset, end of the last record)}`` of a batch: one Spark job
    (only when there is no offset log: a direct call)."""
    from pyspark.sql import functions as F

    rows = (
        batch.groupBy(STORE_COLUMN)
        .agg(
            F.min("physical_offset").alias("start"),
            F.max(F.col("physical_offset") + F.col("total_size")).alias("end"),
        )
        .collect()
    )
    return {row[STORE_COLUMN]: (int(row["start"]), int(row["end"])) for row in rows}


class MultiStoreReputWriter:
    """The ``foreachBatch`` function of a reput over several stores (see module docstring).

    ``stores`` are absolute store paths, as the stream was loaded with (its ``store`` column
    and offset keys). Has the one-store writer's counters (``batches_written``: batches that
    wrote for at least one store; ``messages_written``; ``last_report``: the last store
    batch's) and its ``maintenance``.
    """

    def __init__(
        self,
        spark: SparkSession,
        stores: Sequence[str],
        config: ReputConfig,
        delay_levels_ms: tuple[int, ...],
        *,
        clock: Clock | None = None,
        on_batch: Callable[[BatchReport], None] | None = None,
        offset_log: Path | None = None,
    ) -> None:
        self.clock = clock or SystemClock()
        self.offset_log = offset_log
        self.maintenance = TableMaintenance.for_job(spark, config)
        self.writers = {
            store: ReputBatchWriter(
                spark,
                store,
                config,
                delay_levels_ms,
                clock=self.clock,
                on_batch=on_batch,
                layout=StoreOfSeveral(store),
                maintenance=self.maintenance,
            )
            for store in stores
        }
        self.batches_written = 0

    @property
    def messages_written(self) -> int:
        return sum(writer.messages_written for writer in self.writers.values())

    @property
    def last_report(self) -> BatchReport | None:
        reports = [w.last_report for w in self.writers.values() if w.last_report is not None]
        return max(reports, key=lambda report: report.batch_id, default=None)

    def _ranges(self, batch: DataFrame, batch_id: int) -> dict[str, tuple[int, int]]:
        if self.offset_log is not None:
            logged = logged_store_ranges(self.offset_log, batch_id)
            if logged is not None:
                return logged
        return _batch_ranges(batch)

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        started_ms = self.clock.monotonic_ms()
        wrote = False
        with self.maintenance.quiet():
            for store, (start, end) in self._ranges(batch_df, batch_id).items():
                writer = self.writers.get(store)
                assert writer is not None, f"batch {batch_id}: a store the stream does not read"
                if end > start:
                    wrote = writer.write_span(start, end, batch_id, started_ms) or wrote
        if wrote:
            self.batches_written += 1
            self.maintenance.batch_committed(self.batches_written)
