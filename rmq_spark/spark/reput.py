"""The reput job: Spark's replacement for RocketMQ's ReputMessageService (spec 8.6).

A streaming query reads the CommitLog with the ``rocketmq`` source and, per micro-batch,
appends the batch's rows to ``messages``, ``message_index`` and ``consume_queue``
(``tables.py``) in one idempotent step: each append carries Delta ``txnAppId`` =
``ReputConfig.txn_app_id`` and ``txnVersion`` = the log position the batch ends at, so a batch
replayed after a crash adds nothing to a table that already has it, and rows below what a
table already holds are filtered out when a job starts over a fresh checkpoint. Also owns
progress: how far the tables are behind the durable log (``reput_lag``), logged per batch.
Does not own table schemas (``tables.py``), the source (``source.py``) or argument parsing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import RmqError
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.tables import (
    CONSUME_QUEUE,
    MESSAGE_INDEX,
    MESSAGES,
    TABLE_NAMES,
    append_idempotent,
    committed_floors,
    consume_queue_rows,
    ensure_tables,
    message_index_rows,
    messages_rows,
    optimize_tables,
    register_tables,
    table_path,
)
from rmq_spark.store.codec import (
    BlankPadding,
    DecodedRecord,
    NeedMoreData,
    decode_record,
    peek_header,
)
from rmq_spark.store.layout import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = [
    "BatchReport",
    "ReputBatchWriter",
    "ReputError",
    "ReputLag",
    "reput_lag",
    "run_reput",
    "start_reput",
    "tables_lag",
]

log = logging.getLogger("rmq_spark.reput")
_HISTORY_DEPTH = 20  # commits looked at for the newest reput commit of a table


class ReputError(RmqError):
    """The reput stream failed; the message carries Spark's reason."""


@dataclass(frozen=True, slots=True)
class ReputLag:
    """How far the tables are behind the durable log.

    ``behind_messages`` is exact when ``messages_exact``, else a lower bound (the scan stops
    after ``ReputConfig.lag_scan_messages_max`` records). ``behind_ms`` is how long the oldest
    message not yet in the tables has been stored (0 when caught up).
    """

    durable_offset: int
    reput_offset: int
    behind_bytes: int
    behind_messages: int
    messages_exact: bool
    behind_ms: int

    def describe(self) -> str:
        more = "" if self.messages_exact else "+"
        return (
            f"{self.behind_bytes} bytes, {self.behind_messages}{more} messages, "
            f"{self.behind_ms / 1000:.1f} s behind the durable log (at {self.reput_offset} "
            f"of {self.durable_offset})"
        )


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
    stats_ms: float  # reading and caching the batch, counting it
    write_ms: float  # the three Delta appends (in parallel)


def reput_lag(
    store_dir: str | Path, reput_offset: int, *, clock: Clock, scan_messages_max: int = 100_000
) -> ReputLag:
    """Lag of tables that hold every message below ``reput_offset``, read from the log itself.

    Walks record headers from ``reput_offset`` to the durable offset (the checkpoint's
    confirmPhyOffset) without locks, the way the source reads.
    """
    from rmq_spark.spark.planner import readable_end
    from rmq_spark.spark.segments import MappedSegment, StoreView

    view = StoreView.open(store_dir)
    durable = readable_end(view)  # confirmPhyOffset, or the last valid record of a closed store
    position = max(reput_offset, view.min_offset)
    count = 0
    first_store_ms: int | None = None
    exact = True
    while position < durable:
        if count >= scan_messages_max:
            exact = False
            break
        span = view.span_at(position)
        if span is None:
            break
        try:
            segment = MappedSegment(view.segment_path(span.base_offset))
        except FileNotFoundError:  # deleted by retention meanwhile
            break
        with segment:
            local = position - span.base_offset
            limit = min(durable, span.end_offset) - span.base_offset
            buf = segment.buffer
            while local < limit and count < scan_messages_max:
                header = peek_header(buf, local)
                if isinstance(header, NeedMoreData):
                    break
                total, magic = header
                if magic == BLANK_MAGIC_CODE or magic not in MESSAGE_MAGIC_CODES or total <= 0:
                    break
                if first_store_ms is None:
                    first_store_ms = _store_timestamp_ms(buf, local, segment.path)
                count += 1
                local += total
            else:  # the range or the count limit ended the walk
                position = span.base_offset + local
                continue
            position = span.end_offset  # BLANK, end of file, or an unwritten tail
    behind_ms = 0 if first_store_ms is None else max(0, clock.now_ms() - first_store_ms)
    return ReputLag(
        durable_offset=durable,
        reput_offset=reput_offset,
        behind_bytes=max(0, durable - reput_offset),
        behind_messages=count,
        messages_exact=exact,
        behind_ms=behind_ms,
    )


def _store_timestamp_ms(buf: object, position: int, path: Path) -> int | None:
    outcome = decode_record(buf, position, path=path.name, check_crc=False, with_body=False)  # type: ignore[arg-type]
    if isinstance(outcome, DecodedRecord):
        return outcome.record.store_timestamp_ms
    assert not isinstance(outcome, BlankPadding)
    return None


def _committed_end(spark: SparkSession, path: Path) -> int | None:
    """The log position a table is complete up to: ``end_offset`` of its newest reput commit."""
    from delta.tables import DeltaTable

    if not (path / "_delta_log").is_dir():
        return None
    history = DeltaTable.forPath(spark, str(path)).history(_HISTORY_DEPTH)
    for row in history.select("userMetadata").collect():
        if row.userMetadata and "end_offset" in row.userMetadata:
            return int(json.loads(row.userMetadata)["end_offset"])
    return None


def tables_lag(
    spark: SparkSession,
    store_dir: str | Path,
    tables_dir: str | Path,
    *,
    clock: Clock | None = None,
    scan_messages_max: int = 100_000,
) -> ReputLag:
    """How far the tables under ``tables_dir`` are behind the log of ``store_dir`` now.

    The tables' position is the smallest ``end_offset`` among the three tables' newest reput
    commits (each commit records it next to its Delta txn version); when a table's recent
    history holds only OPTIMIZE commits, the end of the last message in ``messages`` is used.
    """
    from pyspark.sql import functions as F

    ends = [_committed_end(spark, table_path(tables_dir, name)) for name in TABLE_NAMES]
    if all(end is not None for end in ends):
        reput_offset = min(end for end in ends if end is not None)
    else:
        reput_offset = 0
        path = table_path(tables_dir, MESSAGES)
        if (path / "_delta_log").is_dir():
            table = spark.read.format("delta").load(str(path))
            top = table.agg(F.max("physical_offset")).first()[0]
            if top is not None:
                size = table.where(F.col("physical_offset") == F.lit(top)).first()["total_size"]
                reput_offset = int(top) + int(size)
    return reput_lag(
        store_dir, reput_offset, clock=clock or SystemClock(), scan_messages_max=scan_messages_max
    )


def _batch_stats(batch: DataFrame) -> dict[str, int]:
    from pyspark.sql import functions as F

    tx = F.col("sys_flag").bitwiseAND(F.lit(0xC))
    props = F.col("properties")
    tokens = F.filter(
        F.split(F.try_element_at(props, F.lit("KEYS")), " "), lambda token: token != F.lit("")
    )
    indexed = F.when(
        tx != F.lit(0xC),
        F.coalesce(F.size(tokens), F.lit(0)).cast("bigint")
        + F.when(F.try_element_at(props, F.lit("UNIQ_KEY")).isNotNull(), 1).otherwise(0),
    )
    row = batch.agg(
        F.count(F.lit(1)).alias("messages"),
        F.min("physical_offset").alias("start"),
        F.max(F.col("physical_offset") + F.col("total_size")).alias("end"),
        F.sum("total_size").alias("bytes"),
        F.count_if(tx.isin(0, 8)).alias(CONSUME_QUEUE),
        F.sum(indexed).alias(MESSAGE_INDEX),
    ).first()
    return {key: int(row[key] or 0) for key in row.asDict()}


class ReputBatchWriter:
    """The ``foreachBatch`` function: one micro-batch -> the three tables, idempotently.

    Keeps, per table, the physical offset from which rows are missing (``floors``), so that
    only the first batch after a restart filters anything.
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
    ) -> None:
        self.spark = spark
        self.store_dir = Path(store_dir)
        self.config = config
        self.delay_levels_ms = delay_levels_ms
        self.clock = clock or SystemClock()
        self.on_batch = on_batch
        ensure_tables(spark, config.tables_dir)
        self.floors = committed_floors(spark, config.tables_dir)
        self.batches_written = 0
        self.messages_written = 0
        self.last_report: BatchReport | None = None

    def _rows(self, name: str, batch: DataFrame) -> DataFrame:
        if name == CONSUME_QUEUE:
            return consume_queue_rows(batch, self.delay_levels_ms)
        if name == MESSAGE_INDEX:
            return message_index_rows(batch)
        return messages_rows(batch)

    def _append(
        self,
        name: str,
        batch: DataFrame,
        stats: dict[str, int],
        version: int,
        metadata: dict[str, int],
    ) -> None:
        from pyspark.sql import functions as F

        floor = self.floors[name]
        rows = (
            batch
            if floor <= stats["start"]
            else batch.where(F.col("physical_offset") >= F.lit(floor))
        )
        frame = self._rows(name, rows)
        if stats["bytes"] < self.config.small_batch_bytes:
            frame = frame.coalesce(1)
        append_idempotent(
            frame,
            self.config.tables_dir,
            name,
            app_id=self.config.txn_app_id,
            version=version,
            metadata=metadata,
        )
        self.floors[name] = version

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        from pyspark import StorageLevel

        started_ms = self.clock.monotonic_ms()
        batch = batch_df.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            stats = _batch_stats(batch)
            if stats["messages"] == 0:
                return
            version = stats["end"]
            metadata = {"batch_id": batch_id, "start_offset": stats["start"], "end_offset": version}
            if version <= min(self.floors.values()):
                return  # every table holds the whole batch already (a replay)
            stats_ms = self.clock.monotonic_ms() - started_ms
            pending = [name for name in TABLE_NAMES if version > self.floors[name]]
            # Three independent Delta transactions, in parallel: most of a small batch's time is
            # driver-side commit work, so this cuts put-to-visible latency (bench_reput.py).
            with ThreadPoolExecutor(max_workers=len(pending), thread_name_prefix="reput") as pool:
                futures = [
                    pool.submit(self._append, name, batch, stats, version, metadata)
                    for name in pending
                ]
                for future in futures:
                    future.result()  # the first failure fails the batch; a replay finishes it
            write_ms = self.clock.monotonic_ms() - started_ms - stats_ms
        finally:
            batch.unpersist()
        self.batches_written += 1
        self.messages_written += stats["messages"]
        interval = self.config.optimize_interval_batches
        if interval and self.batches_written % interval == 0:
            # Between two batches in this driver: nothing of ours is writing concurrently.
            removed = optimize_tables(self.spark, self.config.tables_dir)
            log.info("reput: OPTIMIZE removed %s small files", json.dumps(removed))
        lag = reput_lag(
            self.store_dir,
            version,
            clock=self.clock,
            scan_messages_max=self.config.lag_scan_messages_max,
        )
        report = BatchReport(
            batch_id=batch_id,
            message_count=stats["messages"],
            log_bytes=stats["bytes"],
            start_offset=stats["start"],
            end_offset=version,
            row_counts={name: stats[name] for name in (CONSUME_QUEUE, MESSAGE_INDEX)},
            lag=lag,
            stats_ms=stats_ms,
            write_ms=write_ms,
        )
        self.last_report = report
        log.info(
            "reput batch %d: %d messages, %d bytes, log [%d, %d) -> consume_queue %d rows, "
            "message_index %d rows (read %.0f ms, write %.0f ms); %s",
            batch_id,
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


def _has_progress(checkpoint_dir: Path) -> bool:
    offsets = checkpoint_dir / "offsets"
    return offsets.is_dir() and any(entry.name.isdigit() for entry in offsets.iterdir())


def _starting_offsets(spark: SparkSession, config: ReputConfig) -> str:
    """Where a query with a fresh checkpoint starts: after what the tables already hold."""
    from pyspark.sql import functions as F

    starts: list[int] = []
    for name in (MESSAGES, MESSAGE_INDEX, CONSUME_QUEUE):  # messages first: see below
        path = table_path(config.tables_dir, name)
        if not (path / "_delta_log").is_dir():
            continue
        top = spark.read.format("delta").load(str(path)).agg(F.max("physical_offset")).first()[0]
        if top is not None:
            starts.append(int(top))  # a record start; its rows are filtered, not duplicated
        elif name == MESSAGES:
            return "earliest"
    if not starts:
        return "earliest"
    return json.dumps({"physical_offset": min(starts)})


def start_reput(
    spark: SparkSession,
    store_dir: str | Path,
    config: ReputConfig,
    delay_levels_ms: tuple[int, ...],
    *,
    clock: Clock | None = None,
    on_batch: Callable[[BatchReport], None] | None = None,
) -> tuple[StreamingQuery, ReputBatchWriter]:
    """Register the tables and start the reput stream; returns the query and its writer.

    Parameters
    ----------
    store_dir
        The store root (the directory holding ``commitlog/`` and ``checkpoint``).
    config
        The ``[reput]`` section: tables and checkpoint directories, trigger, limits.
    delay_levels_ms
        ``parse_message_delay_level(store.message_delay_level)``.

    Raises
    ------
    TableError
        The tables cannot be created or registered.
    """
    register_tables(spark, config.tables_dir, config.database)
    checkpoint = config.resolved_checkpoint_dir
    reader = spark.readStream.format("rocketmq")
    if not _has_progress(checkpoint):
        reader = reader.option("startingOffsets", _starting_offsets(spark, config))
    if config.max_bytes_per_trigger:
        reader = reader.option("maxBytesPerTrigger", str(config.max_bytes_per_trigger))
    writer = ReputBatchWriter(
        spark, store_dir, config, delay_levels_ms, clock=clock, on_batch=on_batch
    )
    stream = (
        reader.load(str(Path(store_dir).absolute()))
        .writeStream.foreachBatch(writer)
        .option("checkpointLocation", str(checkpoint.absolute()))
    )
    if config.available_now:
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=f"{config.trigger_interval_ms} milliseconds")
    return stream.start(), writer


def run_reput(
    spark: SparkSession,
    store_dir: str | Path,
    config: ReputConfig,
    delay_levels_ms: tuple[int, ...],
    *,
    clock: Clock | None = None,
) -> ReputBatchWriter:
    """Run the reput stream until it ends (``available_now``) or is interrupted (Ctrl-C/TERM).

    Returns the writer (``batches_written``, ``messages_written``, ``last_report``).

    Raises
    ------
    ReputError
        The stream failed; carries Spark's message.
    TableError
        The tables cannot be created or registered.
    """
    query, writer = start_reput(spark, store_dir, config, delay_levels_ms, clock=clock)
    log.info(
        "reput: %s -> %s (checkpoint %s, %s)",
        store_dir,
        config.tables_dir,
        config.resolved_checkpoint_dir,
        "available now" if config.available_now else f"every {config.trigger_interval_ms} ms",
    )
    from pyspark.errors import StreamingQueryException

    try:
        while query.isActive:
            query.awaitTermination(1)
    except KeyboardInterrupt:
        log.info("reput: stopping")
        query.stop()
    except StreamingQueryException as err:
        raise ReputError(f"the reput stream failed: {err}") from err
    error = query.exception()
    if error is not None:
        raise ReputError(f"the reput stream failed: {error}")
    log.info(
        "reput: done, %d batches, %d messages", writer.batches_written, writer.messages_written
    )
    return writer
