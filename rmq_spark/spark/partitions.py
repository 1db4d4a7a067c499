"""Planning and reading shared by the batch and the streaming readers of the source.

Owns the partition a Spark task reads (``LogPartition``), opening the store view
(``open_view``), resolving starting and ending options to physical offsets, cutting a range
into partitions (``plan``, which fails or skips ranges that are gone) and reading one
partition into Arrow batches (``read_partition``, on executors). Below both ``stream.py``
and ``driver_read.py``, so neither imports the other's internals.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from rmq_spark.errors import DataLossError, SourceError
from rmq_spark.spark import planner, queue_offsets
from rmq_spark.spark.isolation import READ_COMMITTED, committed_only
from rmq_spark.spark.offsets import (
    SegmentSlice,
    missing_ranges,
    partition_count,
    plan_partitions,
    plan_slices,
)
from rmq_spark.spark.options import EndingMode, SourceOptions, StartingMode
from rmq_spark.spark.schema import ARROW_SCHEMA
from rmq_spark.store.layout import segment_name
from rmq_spark.store.readable import missing_prefix, prefix_error
from rmq_spark.store.view import MappedSegment, StoreView, segment_path

__all__ = [
    "LogPartition",
    "MIN_SPLIT_BYTES",
    "open_view",
    "plan",
    "read_partition",
    "resolve_batch_end",
    "resolve_start",
]

MIN_SPLIT_BYTES = 1 << 20  # do not split a range into parts smaller than this for parallelism

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogPartition(InputPartition):
    """What one Spark task reads: consecutive slices of segment files of one store."""

    store_dir: str
    slices: tuple[SegmentSlice, ...]
    index: int = 0
    # Per-queue starts/ends (``queue_offsets.QueueFilter.entries``): rows outside are dropped.
    queue_bounds: tuple[tuple[str, int, int, int], ...] = ()

    def describe(self, piece: SegmentSlice) -> str:
        return (
            f"partition {self.index}: segment {segment_name(piece.base_offset)} "
            f"[{piece.start_position}, {piece.end_position})"
        )


def open_view(options: SourceOptions) -> StoreView:
    try:
        return StoreView.open(options.path)
    except FileNotFoundError as err:
        raise SourceError(f"rocketmq source: {err}") from err


def resolve_start(view: StoreView, options: SourceOptions, end: int) -> int:
    mode = options.starting_mode
    if mode is StartingMode.EARLIEST:
        check_prefix(view, options)
        return min(view.min_offset, end)
    if mode is StartingMode.LATEST:
        return end
    if mode is StartingMode.TIMESTAMP:
        return planner.offset_for_timestamp(
            view, options.starting_timestamp_ms, min(view.min_offset, end), end
        )
    if mode is StartingMode.QUEUES:
        return queue_offsets.queue_start(view, options, end)
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


def resolve_batch_end(view: StoreView, options: SourceOptions, start: int, end: int) -> int:
    if options.ending_mode is EndingMode.LATEST:
        return end
    if options.ending_mode is EndingMode.TIMESTAMP:
        return planner.offset_for_timestamp(view, options.ending_timestamp_ms, start, end)
    if options.ending_mode is EndingMode.QUEUES:
        return queue_offsets.queue_end(view, options, start, end)
    offset = options.ending_physical_offset
    if offset > end:
        raise SourceError(
            f"endingOffsets physical_offset {offset} is past the readable end {end} of the log"
        )
    planner.check_boundary(view, offset, end, "endingOffsets")
    return offset


def plan(
    view: StoreView, options: SourceOptions, start: int, end: int, skipped: list[tuple[int, int]]
) -> list[LogPartition]:
    """Partitions reading ``[start, end)``; missing ranges fail or are skipped (and recorded)."""
    if start >= end:
        return []
    # The view may be a few calls old (one look per trigger): drop segments deleted since.
    spans = [
        s
        for s in view.spans
        if s.end_offset <= start
        or s.base_offset >= end
        or os.path.exists(view.segment_path(s.base_offset))
    ]
    gaps = missing_ranges(spans, start, end)
    if gaps:
        lost = ", ".join(f"[{lo}, {hi})" for lo, hi in gaps)
        if options.fail_on_data_loss:
            raise DataLossError(gaps[0][0], gaps[-1][1], f"no segment holds {lost}")
        _log.warning("rocketmq source: skipping deleted physical offsets %s", lost)
        skipped.extend(gaps)
    slices = plan_slices(spans, start, end)
    total = sum(s.size_bytes for s in slices)
    count = partition_count(
        total,
        min_partitions=options.min_partitions or os.cpu_count() or 2,
        max_bytes_per_partition=options.max_bytes_per_partition,
        min_split_bytes=MIN_SPLIT_BYTES,
    )
    store_dir = str(view.store_dir)
    partitions = [
        LogPartition(store_dir, pieces, index)
        for index, pieces in enumerate(plan_partitions(slices, count))
    ]
    found = _queue_filter(options)
    if found is None or start >= found.below:
        return partitions
    return [
        replace(p, queue_bounds=found.entries) if p.slices[0].start_offset < found.below else p
        for p in partitions
    ]


@functools.lru_cache(maxsize=16)
def _queue_filter(options: SourceOptions) -> queue_offsets.QueueFilter | None:
    """Per-queue filter of ``options``, once per driver process: it depends only on queue
    offsets and store times, which do not change (computed leniently: a restart must not
    fail on positions retention deleted since the query started)."""
    per_queue_start = options.starting_mode is StartingMode.QUEUES
    if not per_queue_start and options.ending_mode is not EndingMode.QUEUES:
        return None
    return queue_offsets.queue_filter(open_view(options), options, strict=False)


def read_partition(
    partition: InputPartition, options: SourceOptions, schema: pa.Schema = ARROW_SCHEMA
) -> Iterator[pa.RecordBatch]:
    """The record batches of one partition (runs on an executor)."""
    # The decoder is imported here: the processes that only plan (the stream's source runner,
    # the read planner) never load it, nor pyarrow.compute (~0.1 s of each one's start).
    from rmq_spark.spark.columnar import DecodeSettings, read_slice

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
            schema=_with_queue_columns(schema) if partition.queue_bounds else schema,
            include_body=options.include_body,
            check_crc=options.check_crc,
            decompress_body=options.decompress_body,
            context=partition.describe(piece),
        )
        with mapped:
            for batch in read_slice(mapped.buffer, mapped.size_bytes, piece, settings):
                if partition.queue_bounds:
                    kept = queue_offsets.apply_filter(batch, partition.queue_bounds)
                    batch = pa.RecordBatch.from_arrays(
                        [kept.column(name) for name in schema.names], schema=schema
                    )
                if options.isolation == READ_COMMITTED:
                    batch = committed_only(batch)
                yield batch


_QUEUE_COLUMNS = ("topic", "queue_id", "queue_offset")


def _with_queue_columns(schema: pa.Schema) -> pa.Schema:
    """``schema`` plus the columns the per-queue filter reads, if a given schema lacks them."""
    missing = [ARROW_SCHEMA.field(name) for name in _QUEUE_COLUMNS if name not in schema.names]
    return pa.schema(list(schema) + missing) if missing else schema


def check_prefix(view: StoreView, options: SourceOptions) -> None:
    """Fail (``failOnDataLoss``) or warn when the oldest segments of a store we wrote are
    gone without retention having recorded it (``store.readable.missing_prefix``)."""
    missing = missing_prefix(view)
    if missing is None:
        return
    error = prefix_error(view, missing)
    if options.fail_on_data_loss:
        raise DataLossError(missing[0], missing[1], str(error))
    _log.warning("rocketmq source: %s; starting at %d", error, view.min_offset)
