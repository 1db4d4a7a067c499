"""The ``rocketmq`` sink: ``df.write.format("rocketmq")`` and ``df.writeStream.format(...)``.

Thin glue between PySpark's Python Data Source write API (``DataSourceArrowWriter``,
``DataSourceStreamArrowWriter``) and this package: the driver checks options and columns
(``sink_options.py``) when Spark plans the write; each task turns its Arrow batches into
messages with deterministic UNIQ_KEYs (``sink_rows.py``) and sends them, ``batchMessages``
at a time, to a store it opens or to a broker (``sink_targets.py``), where every put is
idempotent. Exactly once across task retries and batch replays (docs/SOURCE.md, "Writing to
RocketMQ"): a retry or replay sends the same keys, and the idempotency window drops repeats.

Keys are ``<write id>-<batch id>-<partition>-<row>``: the write id is the streaming query's
id (stable across restarts from one checkpoint) or, for ``df.write``, option ``writeId`` or a
random id drawn once on the driver (every attempt of every task sees the same one); the batch
id is the micro-batch's (0 for ``df.write``). Option ``keyColumn`` takes keys from a column.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from rmq_spark.errors import ConfigError, SinkError
from rmq_spark.spark.sink_cluster import ClusterTarget
from rmq_spark.spark.sink_options import SinkOptions, check_columns, parse_sink_options
from rmq_spark.spark.sink_rows import key_prefix, messages_of
from rmq_spark.spark.sink_targets import SentCounts, open_target, sink_config

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = [
    "RocketMQBatchWriter",
    "RocketMQStreamWriter",
    "SinkCommitMessage",
    "batch_writer",
    "stream_writer",
    "write_partition",
]

log = logging.getLogger(__name__)

# Local properties Spark's MicroBatchExecution sets on every job of a micro-batch.
_QUERY_ID = "sql.streaming.queryId"
_BATCH_ID = "streaming.sql.batchId"


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """One task's report: its partition, rows sent, rows stored now, rows already stored
    (through a broker every acknowledged row counts as stored)."""

    partition: int
    rows: int
    stored: int
    duplicates: int


def _checked(options: dict[str, str], schema: StructType) -> SinkOptions:
    parsed = parse_sink_options(options)
    check_columns(schema, parsed)
    if parsed.embedded:
        try:
            sink_config(parsed)
        except ConfigError as err:
            raise SinkError(f"the embedded sink's configuration: {err}") from err
    return parsed


def batch_writer(
    options: dict[str, str], schema: StructType, overwrite: bool
) -> RocketMQBatchWriter:
    """``DataSource.writer``: checks on the driver, then one write id for every task."""
    if overwrite:
        raise SinkError("the rocketmq sink only appends: use mode('append')")
    parsed = _checked(options, schema)
    return RocketMQBatchWriter(parsed, parsed.write_id or uuid.uuid4().hex)


def stream_writer(
    options: dict[str, str], schema: StructType, overwrite: bool
) -> RocketMQStreamWriter:
    """``DataSource.streamWriter``: checks on the driver; keys come from the query id."""
    if overwrite:
        raise SinkError("the rocketmq sink only appends: use outputMode('append')")
    return RocketMQStreamWriter(_checked(options, schema))


def write_partition(
    options: SinkOptions, batches: Iterator[pa.RecordBatch], partition: int, prefix: str
) -> SinkCommitMessage:
    """Send every row of one Spark partition; the destination is open only while sending."""
    rows, counts = 0, SentCounts()
    target = None
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            if target is None:
                target = ClusterTarget(options) if options.namesrv else open_target(options)
            messages = list(
                messages_of(
                    batch,
                    partition=partition,
                    first_row=rows,
                    prefix=prefix,
                    key_column=options.key_column,
                    max_delay_level=target.max_delay_level,
                )
            )
            for start in range(0, len(messages), options.batch_messages):
                counts += target.send(messages[start : start + options.batch_messages], partition)
            rows += batch.num_rows
    finally:
        if target is not None:
            target.close()
    return SinkCommitMessage(partition, rows, counts.stored, counts.duplicates)


def _task() -> tuple[int, str, str]:
    """This task's (partition id, query id, batch id); the last two empty outside streams."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise SinkError("the rocketmq sink's write runs inside a Spark task only")
    query = context.getLocalProperty(_QUERY_ID) or ""
    batch = context.getLocalProperty(_BATCH_ID) or ""
    return context.partitionId(), query, batch


def _log_commit(messages: list[WriterCommitMessage | None], what: str) -> None:
    done = [m for m in messages if isinstance(m, SinkCommitMessage)]
    log.info(
        "rocketmq sink: %s committed: %d rows from %d tasks, %d already stored",
        what,
        sum(m.rows for m in done),
        len(done),
        sum(m.duplicates for m in done),
    )


class RocketMQBatchWriter(DataSourceArrowWriter):
    """``df.write.format("rocketmq")``: keys ``<write id>-0-<partition>-<row>``."""

    def __init__(self, options: SinkOptions, write_id: str) -> None:
        self.options = options
        self.write_id = write_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        partition, _, _ = _task()
        return write_partition(self.options, iterator, partition, key_prefix(self.write_id, 0))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(messages, f"write {self.write_id}")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Rows a failed write stored stay (a put cannot be undone); rerun with the same
        # writeId, or keyColumn, to complete it without repeats.
        log.warning("rocketmq sink: write %s aborted; rows already stored stay", self.write_id)


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("rocketmq")``: keys ``<query id>-<batch id>-<partition>-<row>``."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        partition, query, batch = _task()
        if not query or not batch.isdigit():
            raise SinkError(
                f"no streaming query id / batch id in the task (got {query!r}, {batch!r})"
            )
        return write_partition(self.options, iterator, partition, key_prefix(query, int(batch)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        _log_commit(messages, f"batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        log.warning("rocketmq sink: batch %d aborted; its replay stores the rest once", batchId)
