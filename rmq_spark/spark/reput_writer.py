"""The reput job's per-batch writer: one micro-batch of one store -> the three tables.

Owns ``ReputBatchWriter`` (the ``foreachBatch`` function of a one-store reput, and each
store's writer in a reput over several, ``reput_multi.py``) and ``BatchReport``. The stream
itself (options, checkpoint, start and run) is ``reput.py``'s, which picks this writer or
``MultiStoreReputWriter``; both modules import this one, neither imports the other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import ReputError, StoreIOError
from rmq_spark.spark.delta_append import commit_files_once, keep_file_lists_out_of_checksums
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.partitions import open_view, plan
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.reput_files import (
    PartitionFiles,
    ReputFileTask,
    file_schema_json,
    run_partitions,
)
from rmq_spark.spark.reput_maintenance import TableMaintenance
from rmq_spark.spark.reput_progress import ReputLag, reput_lag
from rmq_spark.spark.reput_start import logged_batch_range
from rmq_spark.spark.reput_timeline import log_timeline
from rmq_spark.spark.tables import (
    CONSUME_QUEUE,
    MESSAGE_INDEX,
    MESSAGES,
    ONE_STORE,
    StoreLayout,
    check_store_layout,
    committed_floors,
    ensure_tables,
    table_path,
)
from rmq_spark.store.readable import TailCache
from rmq_spark.store.reader_progress import publish_reader_progress

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BatchReport", "ReputBatchWriter"]

log = logging.getLogger("rmq_spark.reput")


@dataclass(frozen=True, slots=True)
class BatchReport:
    """What one micro-batch wrote."""

    batch_id: int
    message_count: int
    log_bytes: int
    start_offset: int
    end_offset: int
    row_counts: dict[str, int]
    lag: ReputLag
    stats_ms: float  # finding the batch's log range (a Spark job only without an offset log)
    write_ms: float  # the data files and the three Delta commits (in parallel)
    consume_queue_visible_ms: int | None = None  # clock time the consume_queue commit landed
    store: str | None = None  # the store the batch's rows came from (tables of several stores)


def _batch_range(batch: DataFrame) -> tuple[int, int, int]:
    """(messages, first physical offset, end of the last record) of a batch: one Spark job."""
    from pyspark.sql import functions as F

    row = batch.agg(
        F.count(F.lit(1)).alias("messages"),
        F.min("physical_offset").alias("start"),
        F.max(F.col("physical_offset") + F.col("total_size")).alias("end"),
    ).first()
    return int(row["messages"]), int(row["start"] or 0), int(row["end"] or 0)


class ReputBatchWriter:
    """The ``foreachBatch`` function: one micro-batch -> the three tables, idempotently.

    Only the batch's log range matters: it is cut into the source's partitions, whose
    records a Spark job decodes and writes as Parquet data files of each table
    (``reput_files.py``; a batch under ``small_batch_bytes`` is written by the driver itself,
    with no job), and the files are committed to the three tables in parallel. The rows never
    pass through the JVM, which is where most of a Spark write's time goes for these rows.

    Keeps, per table, the physical offset from which rows are missing (``floors``: its last
    reput version); rows below it are left out, which matters only in the first batch after a
    restart over a fresh checkpoint.

    ``layout`` is the store's rows in the tables: ``ONE_STORE``, or ``StoreOfSeveral`` for one
    store's writer among several writing the same tables (``reput_multi.py``): its rows then
    carry the ``store`` column, its commits the txn app id ``<txn_app_id>:<store>`` (so each
    store's log position is its own txn version). A given ``maintenance`` is shared and
    driven by the caller.
    """

    def __init__(
        self,
        spark: SparkSession,
        store_dir: str | Path,
        config: ReputConfig,
        delay_levels_ms: tuple[int, ...],
        *,
        clock: Clock | None = None,
        on_batch: Callable[[BatchReport], None] | None = None,
        offset_log: Path | None = None,
        layout: StoreLayout = ONE_STORE,
        maintenance: TableMaintenance | None = None,
    ) -> None:
        self.spark = spark
        self.layout = layout
        self.app_id = layout.app_id(config.txn_app_id)
        self.offset_log = offset_log  # the stream's <checkpoint>/offsets: each batch's range
        self.store_dir = Path(store_dir)
        self.config = config
        self.delay_levels_ms = delay_levels_ms
        self.clock = clock or SystemClock()
        self.on_batch = on_batch
        store_path = str(self.store_dir.absolute())
        # Every record, as the store's queues hold them (half and op markers too): the
        # consume_queue table mirrors the broker's units; a transaction's message is in its
        # real topic once, as the COMMIT record.
        options = {"path": store_path, "isolation": "read_uncommitted"}
        self.source_options = parse_options(options, streaming=True)
        check_store_layout(spark, config.tables_dir, layout)
        keep_file_lists_out_of_checksums(spark)
        ensure_tables(spark, config.tables_dir, layout)
        self.floors = committed_floors(spark, config.tables_dir, self.app_id, layout)
        self.batches_written = 0
        self.messages_written = 0
        self.skipped_ranges: list[tuple[int, int]] = []
        self.last_report: BatchReport | None = None
        self.consume_queue_visible_ms: int | None = None
        self._drives_maintenance = maintenance is None
        self.maintenance = maintenance or TableMaintenance.for_job(spark, config, self.clock)
        self._timeline: dict[str, Any] = {}  # the batch being written (reput_timeline.py)
        self._tail = TailCache()  # the log's end as each report last judged it
        self.publish_progress(min(self.floors.values()))

    def publish_progress(self, physical_offset: int) -> None:
        """Tell the store's retention that the tables hold every message below
        ``physical_offset``. A failure is logged, not raised: retention then keeps going by
        the last published (lower) position, which only keeps more of the log."""
        if not self.store_dir.is_dir():
            return  # no store here: the source fails on its own
        try:
            publish_reader_progress(
                self.store_dir, self.config.reader_name, physical_offset, self.clock.now_ms()
            )
        except StoreIOError as err:
            log.warning("reput: cannot publish progress %d: %s", physical_offset, err)

    def _range(self, batch: DataFrame, batch_id: int) -> tuple[int, int] | None:
        """``(start, end)`` of the batch in the log; ``None``: the batch holds no message."""
        if self.offset_log is not None:
            logged = logged_batch_range(self.offset_log, batch_id)
            if logged is not None:
                start, end = logged
                return (start, end) if end > start else None
        messages, start, end = _batch_range(batch)  # no offset log (a direct call)
        return (start, end) if messages else None

    def _write_files(self, start: int, end: int, task: ReputFileTask) -> list[PartitionFiles]:
        """Data files of every pending table for the log range ``[start, end)``."""
        partitions = plan(
            open_view(self.source_options), self.source_options, start, end, self.skipped_ranges
        )
        if not partitions:
            return []
        if end - start < self.config.small_batch_bytes:
            return run_partitions(task, partitions)
        rdd = self.spark.sparkContext.parallelize(partitions, len(partitions))
        return rdd.mapPartitions(lambda parts: run_partitions(task, parts)).collect()

    def _commit(
        self, name: str, adds: list[dict[str, Any]], version: int, metadata: dict[str, object]
    ) -> int:
        begin = self._since_start_ms()
        written = commit_files_once(
            self.spark,
            str(table_path(self.config.tables_dir, name)),
            adds,
            schema_json=file_schema_json(name, self.layout),
            app_id=self.app_id,
            version=version,
            metadata=metadata,
            on_checksum_wait=self.maintenance.resume_optimize,
        )
        self.floors[name] = version
        if name == CONSUME_QUEUE:
            self.consume_queue_visible_ms = self.clock.now_ms()
        self._timeline.setdefault("commits", {})[name] = [begin, self._since_start_ms()]
        self._note_beside()
        return written or 0

    def _since_start_ms(self) -> int:
        return round(self.clock.monotonic_ms() - self._timeline.get("started", 0.0))

    def _note_beside(self) -> None:
        beside = self._timeline.setdefault("beside", [])
        for chore in self.maintenance.chores:
            if chore not in beside:
                beside.append(chore)

    def write_range(self, start: int, version: int, batch_id: int) -> dict[str, int]:
        """Write and commit ``[start, version)`` to every table that lacks it; rows per table."""
        pending = {name: floor for name, floor in self.floors.items() if version > floor}
        task = ReputFileTask(
            self.source_options,
            str(self.config.tables_dir),
            pending,
            self.delay_levels_ms,
            self.layout,
        )
        files_began = self.clock.monotonic_ms()
        self._note_beside()
        try:
            parts = self._write_files(start, version, task)
        except Exception as err:
            raise ReputError(f"batch {batch_id}: writing [{start}, {version}): {err}") from err
        self._timeline["files_ms"] = round(self.clock.monotonic_ms() - files_began)
        self._note_beside()
        metadata: dict[str, object] = {
            "batch_id": batch_id,
            "start_offset": start,
            "end_offset": version,
            **self.layout.commit_metadata(),
        }
        self.consume_queue_visible_ms = None
        # consume_queue first: its rows are the ones consumers wait for (put-to-visible).
        order = [name for name in (CONSUME_QUEUE, MESSAGE_INDEX, MESSAGES) if name in pending]
        adds = {name: [add for part in parts for add in part.adds.get(name, [])] for name in order}
        # Three independent Delta transactions, in parallel: a commit is driver-side work.
        with ThreadPoolExecutor(max_workers=len(order), thread_name_prefix="reput") as pool:
            futures = {
                name: pool.submit(self._commit, name, adds[name], version, metadata)
                for name in order
            }
            return {name: _committed(name, future) for name, future in futures.items()}

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        started_ms = self.clock.monotonic_ms()
        with self.maintenance.quiet():
            span = self._range(batch_df, batch_id)
            if span is not None:
                self.write_span(span[0], span[1], batch_id, started_ms)

    def write_span(self, start: int, version: int, batch_id: int, started_ms: float) -> bool:
        """Write the batch's ``[start, version)`` of this writer's store to the tables that
        lack it, publish the progress and report; ``False``: every table had it (a replay).
        ``started_ms`` (monotonic) is when the batch began."""
        if version <= min(self.floors.values()):
            self.publish_progress(version)
            return False
        stats_ms = self.clock.monotonic_ms() - started_ms
        self._timeline = {"started": started_ms}
        written = self.write_range(start, version, batch_id)
        write_ms = self.clock.monotonic_ms() - started_ms - stats_ms
        self.publish_progress(version)
        self.batches_written += 1
        self.messages_written += written.get(MESSAGES, 0)
        if self._drives_maintenance:
            self.maintenance.batch_committed(self.batches_written)
        self._report(batch_id, start, version, written, stats_ms, write_ms)
        return True

    def _report(
        self,
        batch_id: int,
        start: int,
        version: int,
        written: dict[str, int],
        stats_ms: float,
        write_ms: float,
    ) -> None:
        lag = reput_lag(
            self.store_dir,
            version,
            clock=self.clock,
            scan_messages_max=self.config.lag_scan_messages_max,
            cache=self._tail,
        )
        report = BatchReport(
            batch_id=batch_id,
            message_count=written.get(MESSAGES, 0),
            log_bytes=version - start,
            start_offset=start,
            end_offset=version,
            row_counts={name: written.get(name, 0) for name in (CONSUME_QUEUE, MESSAGE_INDEX)},
            lag=lag,
            stats_ms=stats_ms,
            write_ms=write_ms,
            consume_queue_visible_ms=self.consume_queue_visible_ms,
            store=self.layout.store,
        )
        self.last_report = report
        self._log_timeline(report)
        log.info(
            "reput batch %d%s: %d messages, %d bytes, log [%d, %d) -> consume_queue %d rows, "
            "message_index %d rows (range %.0f ms, write %.0f ms); %s",
            batch_id,
            self.layout.label,
            report.message_count,
            report.log_bytes,
            report.start_offset,
            report.end_offset,
            report.row_counts[CONSUME_QUEUE],
            report.row_counts[MESSAGE_INDEX],
            stats_ms,
            write_ms,
            lag.describe(),
        )
        if self.on_batch is not None:
            self.on_batch(report)

    def _log_timeline(self, report: BatchReport) -> None:
        timeline = self._timeline
        started = timeline.pop("started", self.clock.monotonic_ms())
        log_timeline(
            "batch",
            batch_id=report.batch_id,
            store=report.store,
            start_ms=round(self.clock.now_ms() - (self.clock.monotonic_ms() - started)),
            messages=report.message_count,
            range_ms=round(report.stats_ms),
            write_ms=round(report.write_ms),
            **timeline,
        )


def _committed(name: str, future: Future[int]) -> int:
    """A table's commit result; the first failure fails the batch (a replay finishes it)."""
    try:
        return future.result()
    except ReputError:
        raise
    except Exception as err:
        raise ReputError(f"committing to {name} failed: {err}") from err
