"""Queries over the reput tables and the CommitLog: by key, by message id, by store time.

Owns the lookups people make against RocketMQ's IndexFile and ConsumeQueue, answered from
the Delta tables (``tables.py``) with filters on the clustering columns so that Delta skips
almost every file, plus the offset-message-id lookup, which needs no table at all: the id
holds the physical offset, so the record is read straight from its segment (FORMAT.md 5).
Does not own the tables' contents (``reput.py``) or output formatting (the CLI).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rmq_spark.errors import (
    CorruptRecordError,
    MessageNotFoundError,
    OffsetOutOfRangeError,
)
from rmq_spark.spark.tables import (
    CONSUME_QUEUE,
    MESSAGE_INDEX,
    MESSAGES,
    STORE_COLUMN,
    table_path,
)
from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.hashing import index_key_hash
from rmq_spark.store.msg_id import decode_offset_msg_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from rmq_spark.store.message import MessageRecord
    from rmq_spark.store.view import StoreView

__all__ = [
    "consume_queue_range",
    "message_by_msg_id",
    "message_frame_by_msg_id",
    "messages_by_key",
    "messages_by_time",
    "record_at",
]


def _ms_literal(ms: int):  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    return F.timestamp_millis(F.lit(int(ms)))


def _table(spark: SparkSession, tables_dir: str | Path, name: str) -> DataFrame:
    return spark.read.format("delta").load(str(table_path(tables_dir, name)))


def messages_by_key(
    spark: SparkSession,
    tables_dir: str | Path,
    topic: str,
    key: str,
    *,
    begin_ms: int | None = None,
    end_ms: int | None = None,
) -> DataFrame:
    """Messages of ``topic`` whose UNIQ_KEY or one of whose KEYS is ``key`` (RocketMQ's
    ``queryMessage``), optionally stored in ``[begin_ms, end_ms)``, in log order.

    The index lookup filters on ``key_hash`` (the clustering column) first, then compares the
    real topic and key, so hash collisions never leak through (unlike the IndexFile, 7.7).

    Returns
    -------
    DataFrame
        Rows of ``messages`` (the source's schema).
    """
    from pyspark.sql import functions as F

    index = _table(spark, tables_dir, MESSAGE_INDEX).where(
        (F.col("key_hash") == F.lit(index_key_hash(f"{topic}#{key}")))
        & (F.col("topic") == F.lit(topic))
        & (F.col("key") == F.lit(key))
    )
    index = _time_range(index, begin_ms, end_ms)
    several = STORE_COLUMN in index.columns  # physical offsets repeat across stores
    wanted = ["physical_offset", "store_timestamp"] + ([STORE_COLUMN] if several else [])
    hits = index.select(*wanted).distinct().collect()
    messages = _table(spark, tables_dir, MESSAGES)
    if not hits:
        return messages.limit(0)
    times = [row.store_timestamp for row in hits]
    found = messages.where(
        (F.col("topic") == F.lit(topic))
        & F.col("store_timestamp").between(F.lit(min(times)), F.lit(max(times)))
    )
    by_store: dict[str | None, set[int]] = {}
    for row in hits:
        by_store.setdefault(row[STORE_COLUMN] if several else None, set()).add(row.physical_offset)
    match = None
    for store, offsets in by_store.items():
        one = F.col("physical_offset").isin(sorted(offsets))
        one = one if store is None else one & (F.col(STORE_COLUMN) == F.lit(store))
        match = one if match is None else match | one
    return _log_order(found.where(match))


def _log_order(frame: DataFrame) -> DataFrame:
    """Log order: by physical offset, within each store for tables of several stores."""
    if STORE_COLUMN in frame.columns:
        return frame.orderBy(STORE_COLUMN, "physical_offset")
    return frame.orderBy("physical_offset")


def _time_range(frame: DataFrame, begin_ms: int | None, end_ms: int | None) -> DataFrame:
    from pyspark.sql import functions as F

    if begin_ms is not None:
        frame = frame.where(F.col("store_timestamp") >= _ms_literal(begin_ms))
    if end_ms is not None:
        frame = frame.where(F.col("store_timestamp") < _ms_literal(end_ms))
    return frame


def messages_by_time(
    spark: SparkSession,
    tables_dir: str | Path,
    topic: str,
    begin_ms: int | None = None,
    end_ms: int | None = None,
) -> DataFrame:
    """Messages of ``topic`` stored in ``[begin_ms, end_ms)`` (either end open), in log order."""
    from pyspark.sql import functions as F

    frame = _table(spark, tables_dir, MESSAGES).where(F.col("topic") == F.lit(topic))
    return _log_order(_time_range(frame, begin_ms, end_ms))


def consume_queue_range(
    spark: SparkSession,
    tables_dir: str | Path,
    topic: str,
    queue_id: int,
    start_queue_offset: int = 0,
    end_queue_offset: int | None = None,
) -> DataFrame:
    """ConsumeQueue rows of one queue in ``[start, end)`` queue offsets (a consumer's pull)."""
    from pyspark.sql import functions as F

    frame = _table(spark, tables_dir, CONSUME_QUEUE).where(
        (F.col("topic") == F.lit(topic))
        & (F.col("queue_id") == F.lit(queue_id))
        & (F.col("queue_offset") >= F.lit(start_queue_offset))
    )
    if end_queue_offset is not None:
        frame = frame.where(F.col("queue_offset") < F.lit(end_queue_offset))
    if STORE_COLUMN in frame.columns:  # the queue of each store (a queue is a broker's)
        return frame.orderBy(STORE_COLUMN, "queue_offset")
    return frame.orderBy("queue_offset")


def record_at(store_dir: str | Path, physical_offset: int) -> DecodedRecord:
    """The record starting at ``physical_offset``, read from its segment without any lock.

    Raises
    ------
    OffsetOutOfRangeError
        The offset is below the oldest segment or at/after the durable end.
    MessageNotFoundError
        No record starts there.
    CorruptRecordError
        A record starts there but its bytes are corrupt (the error names file and position).
    """
    from rmq_spark.spark.planner import readable_end
    from rmq_spark.store.view import StoreView

    view = StoreView.open(store_dir)
    if not view.broker_open and view.min_offset <= physical_offset:
        # A closed store: finding its end means validating its newest segment (0.5 s for a
        # full 1 GiB one). A point read does not need it: a record that starts here, says it
        # starts here and passes its CRC is a whole record, not a torn tail. Anything else
        # falls through to the exact checks below, which name the reason.
        try:
            return _decode_at(view, physical_offset, end=None)
        except (OffsetOutOfRangeError, MessageNotFoundError, CorruptRecordError):
            pass
    # A closed store (crashed, copied, or written by Apache RocketMQ) may hold 0 or a stale
    # value at confirmPhyOffset: readable_end then finds its last valid record.
    end = readable_end(view)
    if not view.min_offset <= physical_offset < end:
        raise OffsetOutOfRangeError(physical_offset, view.min_offset, end)
    return _decode_at(view, physical_offset, end=end)


def _decode_at(view: StoreView, physical_offset: int, *, end: int | None) -> DecodedRecord:
    from rmq_spark.store.reader import read_record_at
    from rmq_spark.store.view import FileSegment

    known_end = view.max_extent if end is None else end
    span = view.span_at(physical_offset)
    if span is None:
        raise OffsetOutOfRangeError(physical_offset, view.min_offset, known_end)
    path = view.segment_path(span.base_offset)
    try:
        with FileSegment(path, span.base_offset) as segment:
            found = read_record_at(segment, physical_offset)
    except FileNotFoundError as err:
        raise OffsetOutOfRangeError(physical_offset, view.min_offset, known_end) from err
    if found is None:
        raise MessageNotFoundError(
            f"no message starts at physical offset {physical_offset} "
            f"({path.name} position {physical_offset - span.base_offset})"
        )
    return found


def message_by_msg_id(store_dir: str | Path, msg_id: str) -> MessageRecord:
    """The message an offset message id names (FORMAT.md 5), read straight from the CommitLog.

    Raises
    ------
    InvalidMessageIdError
        ``msg_id`` is not an offset message id (32 or 56 hex digits).
    OffsetOutOfRangeError, MessageNotFoundError, CorruptRecordError
        As ``record_at``.
    """
    _host, physical_offset = decode_offset_msg_id(msg_id)
    return record_at(store_dir, physical_offset).record


def message_frame_by_msg_id(spark: SparkSession, store_dir: str | Path, msg_id: str) -> DataFrame:
    """The same message as a one-row DataFrame with the ``rocketmq`` source's schema.

    The source reads exactly ``[offset, offset + total_size)``: no table, no scan.
    """
    import json

    _host, physical_offset = decode_offset_msg_id(msg_id)
    decoded = record_at(store_dir, physical_offset)
    return (
        spark.read.format("rocketmq")
        .option("startingOffsets", json.dumps({"physical_offset": physical_offset}))
        .option(
            "endingOffsets", json.dumps({"physical_offset": physical_offset + decoded.total_size})
        )
        .load(str(Path(store_dir).absolute()))
    )
