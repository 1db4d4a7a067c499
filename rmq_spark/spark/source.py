"""The ``rocketmq`` Spark data source: batch and Structured Streaming reads of a store's log.

Thin glue between PySpark's Python Data Source API (``DataSource``, ``DataSourceReader``,
``DataSourceStreamReader`` with admission control and ``Trigger.AvailableNow``, Spark 4.2)
and this package: options come from ``options.py``, offsets and partitions from
``offsets.py``, the log's end, batch limits and timestamps from ``planner.py``, rows from
``columnar.py``. Spark calls ``initialOffset`` / ``latestOffset`` / ``partitions`` on the
driver and ``read`` on executors; ``read`` keeps no state between calls.

Usage::

    register(spark)
    spark.read.format("rocketmq").load("/path/to/store")
    spark.readStream.format("rocketmq").option("startingOffsets", "earliest").load(path)
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from rmq_spark.errors import DataLossError, SourceError
from rmq_spark.spark import planner
from rmq_spark.spark.columnar import DecodeSettings, read_slice
from rmq_spark.spark.offsets import (
    SegmentSlice,
    missing_ranges,
    offset_dict,
    parse_offset,
    partition_count,
    plan_partitions,
    plan_slices,
)
from rmq_spark.spark.options import EndingMode, SourceOptions, StartingMode, parse_options
from rmq_spark.spark.schema import ARROW_SCHEMA, arrow_schema_for, spark_schema
from rmq_spark.spark.segments import MappedSegment, StoreView, segment_path
from rmq_spark.store.layout import segment_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "FORMAT_NAME",
    "LogPartition",
    "RocketMQBatchReader",
    "RocketMQDataSource",
    "RocketMQStreamReader",
    "register",
]

FORMAT_NAME = "rocketmq"
MIN_SPLIT_BYTES = 1 << 20  # do not split a range into parts smaller than this for parallelism
BACKLOG_COUNT_MAX = 1_000_000  # metrics(): count at most this many messages, then estimate
PROGRESS_COUNT_MAX = 20_000  # reportLatestOffset (every trigger): ~4 ms of header hops at most

_log = logging.getLogger(__name__)


def register(spark: SparkSession) -> None:
    """Make ``format("rocketmq")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(RocketMQDataSource)


@dataclass(frozen=True)
class LogPartition(InputPartition):
    """What one Spark task reads: consecutive slices of segment files of one store."""

    store_dir: str
    slices: tuple[SegmentSlice, ...]
    index: int = 0

    def describe(self, piece: SegmentSlice) -> str:
        return (
            f"partition {self.index}: segment {segment_name(piece.base_offset)} "
            f"[{piece.start_position}, {piece.end_position})"
        )


class RocketMQDataSource(DataSource):
    """``format("rocketmq")``: reads a store's CommitLog segments directly (no broker)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> RocketMQBatchReader:
        options = parse_options(self.options, streaming=False)
        return RocketMQBatchReader(options, arrow_schema_for(schema))

    def streamReader(self, schema: StructType) -> RocketMQStreamReader:
        from rmq_spark.spark.driver_read import stream_reader  # it imports this module

        options = parse_options(self.options, streaming=True)
        return stream_reader(options, arrow_schema_for(schema))


# --- shared planning ------------------------------------------------------------------------


def _open_view(options: SourceOptions) -> StoreView:
    try:
        return StoreView.open(options.path)
    except FileNotFoundError as err:
        raise SourceError(f"rocketmq source: {err}") from err


def _resolve_start(view: StoreView, options: SourceOptions, end: int) -> int:
    mode = options.starting_mode
    if mode is StartingMode.EARLIEST:
        return min(view.min_offset, end)
    if mode is StartingMode.LATEST:
        return end
    if mode is StartingMode.TIMESTAMP:
        return planner.offset_for_timestamp(
            view, options.starting_timestamp_ms, min(view.min_offset, end), end
        )
    offset = options.starting_physical_offset
    if offset < view.min_offset:
        if options.fail_on_data_loss:
            raise DataLossError(
                offset, view.min_offset, "startingOffsets points below the oldest stored segment"
            )
        _log.warning(
            "rocketmq source: startingOffsets %d was deleted; starting at %d",
            offset,
            view.min_offset,
        )
        return view.min_offset
    planner.check_boundary(view, offset, end)
    return offset


def _resolve_batch_end(view: StoreView, options: SourceOptions, start: int, end: int) -> int:
    if options.ending_mode is EndingMode.LATEST:
        return end
    if options.ending_mode is EndingMode.TIMESTAMP:
        return planner.offset_for_timestamp(view, options.ending_timestamp_ms, start, end)
    offset = options.ending_physical_offset
    if offset > end:
        raise SourceError(
            f"endingOffsets physical_offset {offset} is past the readable end {end} of the log"
        )
    planner.check_boundary(view, offset, end)
    return offset


def _plan(
    view: StoreView, options: SourceOptions, start: int, end: int, skipped: list[tuple[int, int]]
) -> list[LogPartition]:
    """Partitions reading ``[start, end)``; missing ranges fail or are skipped (and recorded)."""
    if start >= end:
        return []
    gaps = missing_ranges(view.spans, start, end)
    if gaps:
        lost = ", ".join(f"[{lo}, {hi})" for lo, hi in gaps)
        if options.fail_on_data_loss:
            raise DataLossError(gaps[0][0], gaps[-1][1], f"no segment holds {lost}")
        _log.warning("rocketmq source: skipping deleted physical offsets %s", lost)
        skipped.extend(gaps)
    slices = plan_slices(view.spans, start, end)
    total = sum(s.size_bytes for s in slices)
    count = partition_count(
        total,
        min_partitions=options.min_partitions or os.cpu_count() or 2,
        max_bytes_per_partition=options.max_bytes_per_partition,
        min_split_bytes=MIN_SPLIT_BYTES,
    )
    store_dir = str(view.store_dir)
    return [
        LogPartition(store_dir, pieces, index)
        for index, pieces in enumerate(plan_partitions(slices, count))
    ]


def read_partition(
    partition: InputPartition, options: SourceOptions, schema: pa.Schema = ARROW_SCHEMA
) -> Iterator[pa.RecordBatch]:
    """The record batches of one partition (runs on an executor)."""
    if not isinstance(partition, LogPartition):
        return  # Spark's stand-in partition for an empty read
    for piece in partition.slices:
        path = segment_path(Path(partition.store_dir), piece.base_offset)
        try:
            mapped = MappedSegment(path)
        except FileNotFoundError:
            if options.fail_on_data_loss:
                raise DataLossError(
                    piece.start_offset,
                    piece.end_offset,
                    f"segment {path} was deleted before {partition.describe(piece)} read it",
                ) from None
            _log.warning(
                "rocketmq source: segment %s deleted before it was read; skipped [%d, %d)",
                path,
                piece.start_offset,
                piece.end_offset,
            )
            continue
        settings = DecodeSettings(
            path=str(path),
            topics=options.topics,
            topic_pattern=options.topic_pattern,
            schema=schema,
            include_body=options.include_body,
            check_crc=options.check_crc,
            context=partition.describe(piece),
        )
        with mapped:
            yield from read_slice(mapped.buffer, mapped.size_bytes, piece, settings)


# --- batch ------------------------------------------------------------------------------------


class RocketMQBatchReader(DataSourceReader):
    """``spark.read.format("rocketmq")``: one plan over ``[start, end)`` fixed at planning."""

    def __init__(self, options: SourceOptions, schema: pa.Schema = ARROW_SCHEMA) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> list[LogPartition]:
        view = _open_view(self.options)
        end = planner.readable_end(view)
        start = _resolve_start(view, self.options, end)
        stop = _resolve_batch_end(view, self.options, start, end)
        if start > stop:
            raise SourceError(
                f"the starting offset {start} is after the ending offset {stop}; "
                "check startingOffsets/startingTimestamp against endingOffsets/endingTimestamp"
            )
        return _plan(view, self.options, start, stop, [])

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.options, self.schema)


# --- streaming --------------------------------------------------------------------------------


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("rocketmq")``: micro-batches over the growing log.

    Offsets are ``{"physical_offset": N}`` (N is always a record boundary); a batch reads
    every record starting in ``[start, end)``. Admission control: ``maxBytesPerTrigger`` /
    ``maxMessagesPerTrigger`` (also under ``Trigger.AvailableNow``, which stops at the end
    seen when the query started).
    """

    def __init__(self, options: SourceOptions, schema: pa.Schema = ARROW_SCHEMA) -> None:
        self.options = options
        self.schema = schema
        self._tail = planner.TailCache()
        self._available_now_end: int | None = None
        self._planned_end: int | None = None  # what the last latestOffset(start, limit) gave
        self.skipped_ranges: list[tuple[int, int]] = []

    def _end(self, view: StoreView) -> int:
        end = planner.readable_end(view, self._tail)
        if self._available_now_end is not None:
            end = min(end, self._available_now_end)
        return end

    def initialOffset(self) -> dict:
        view = _open_view(self.options)
        return offset_dict(_resolve_start(view, self.options, self._end(view)))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_trigger:
            return ReadMaxRows(self.options.max_messages_per_trigger)
        if self.options.max_bytes_per_trigger:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        planned = self._batch_end(parse_offset(start, what="start offset"), limit)
        self._planned_end = planned
        return offset_dict(planned)

    def _batch_end(self, begin: int, limit: ReadLimit) -> int:
        view = _open_view(self.options)
        end = self._end(view)
        if end <= begin:
            return begin
        if isinstance(limit, ReadAllAvailable):
            return end
        records_max = self.options.max_messages_per_trigger
        bytes_max = self.options.max_bytes_per_trigger
        if isinstance(limit, ReadMaxRows):
            records_max = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            bytes_max = limit.max_bytes
        first = begin
        if begin < view.min_offset:
            if self.options.fail_on_data_loss:
                raise DataLossError(begin, view.min_offset, "the next batch starts there")
            first = view.min_offset
        batch_end = planner.advance(view, first, end, records_max=records_max, bytes_max=bytes_max)
        return max(batch_end, begin)

    def reportLatestOffset(self) -> dict:
        """The durable end and the backlog behind the batch just planned, for the progress.

        Spark calls this right after ``latestOffset(start, limit)`` and uses the answer only
        for ``SourceProgress.latestOffset`` (it never deserializes, compares or checkpoints
        it), so next to the canonical ``physical_offset`` it carries ``backlogBytes`` and
        ``backlogMessages`` (``backlogMessagesExact`` false: an estimate past
        ``PROGRESS_COUNT_MAX`` messages) behind the end of that batch.
        """
        view = _open_view(self.options)
        end = planner.readable_end(view, self._tail)
        reported: dict = offset_dict(end)
        if self._planned_end is not None:
            first = max(self._planned_end, view.min_offset)
            found = planner.backlog(view, min(first, end), end, PROGRESS_COUNT_MAX)
            reported["backlogBytes"] = max(0, end - self._planned_end)
            reported["backlogMessages"] = found.messages
            reported["backlogMessagesExact"] = found.exact
        return reported

    def prepareForTriggerAvailableNow(self) -> None:
        view = _open_view(self.options)
        self._available_now_end = planner.readable_end(view, self._tail)

    def partitions(self, start: dict, end: dict) -> list[LogPartition]:
        begin = parse_offset(start, what="start offset")
        stop = parse_offset(end, what="end offset")
        return _plan(_open_view(self.options), self.options, begin, stop, self.skipped_ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.options, self.schema)

    def commit(self, end: dict) -> None:
        parse_offset(end, what="committed offset")

    def metrics(self, latest_consumed_offset: dict | None = None) -> dict[str, str]:
        """Backlog behind the durable end, in the shape of Spark's ``ReportsSourceMetrics``.

        Spark 4.2 does not call this for Python sources; ``reportLatestOffset`` (shown as
        ``latestOffset`` in the query progress) carries the durable end and the backlog, and
        this method serves jobs and tests that want them (or the skipped ranges) directly.
        """
        view = _open_view(self.options)
        end = planner.readable_end(view, self._tail)
        result = {
            "latestDurableOffset": str(end),
            "dataLossSkippedRanges": json.dumps(self.skipped_ranges),
        }
        if latest_consumed_offset is not None:
            consumed = parse_offset(latest_consumed_offset, what="consumed offset")
            first = min(max(consumed, view.min_offset), end)
            found = planner.backlog(view, first, end, BACKLOG_COUNT_MAX)
            result["backlogBytes"] = str(max(0, end - consumed))
            result["backlogMessages"] = str(found.messages)
            result["backlogMessagesExact"] = str(found.exact).lower()
        return result
