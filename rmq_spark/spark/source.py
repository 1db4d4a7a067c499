"""The ``rocketmq`` Spark data source: batch and Structured Streaming reads of a store's log.

Thin glue between PySpark's Python Data Source API (``DataSource``, ``DataSourceReader``,
``DataSourceStreamReader`` with admission control and ``Trigger.AvailableNow``, Spark 4.2)
and this package: options come from ``options.py``, offsets and partitions from
``offsets.py`` and ``partitions.py`` (planning shared by batch and streaming), the streaming
reader from ``stream.py`` (``driver_read.py`` for ``driverReadMaxBytes``), the log's end,
batch limits and timestamps from ``planner.py``, rows from ``columnar.py``. Spark calls
``initialOffset`` / ``latestOffset`` / ``partitions`` on the driver and ``read`` on
executors; ``read`` keeps no state between calls.

Usage (Spark finds the source through the ``pyspark_rocketmq`` package, nothing to register;
``register`` serves a Python that cannot see that package)::

    spark.read.format("rocketmq").load("/path/to/store")
    spark.readStream.format("rocketmq").option("startingOffsets", "earliest").load(path)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from rmq_spark.errors import RmqError, SourceError
from rmq_spark.spark import planner
from rmq_spark.spark.driver_read import stream_reader
from rmq_spark.spark.multi_store import (
    MultiStoreBatchReader,
    MultiStoreStreamReader,
    per_store_options,
    query_schemas,
    spark_schema_for,
)
from rmq_spark.spark.option_hints import (
    KAFKA_SINK_EQUIVALENT,
    SPARK_TABLE_KEYS,
    unknown_read_or_write_option,
)
from rmq_spark.spark.option_values import OPTION_NAMES
from rmq_spark.spark.options import SourceOptions, check_options, parse_options
from rmq_spark.spark.partitions import (
    MIN_SPLIT_BYTES,
    LogPartition,
    open_view,
    plan,
    read_partition,
    resolve_batch_end,
    resolve_start,
)
from rmq_spark.spark.py_files import expose_py_files_to_stream_runner
from rmq_spark.spark.schema import ARROW_SCHEMA
from rmq_spark.spark.sink_options import SINK_OPTION_NAMES
from rmq_spark.spark.stream import BACKLOG_COUNT_MAX, PROGRESS_COUNT_MAX, RocketMQStreamReader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from rmq_spark.spark.sink import RocketMQBatchWriter, RocketMQStreamWriter

__all__ = [
    "BACKLOG_COUNT_MAX",
    "FORMAT_NAME",
    "LogPartition",
    "MIN_SPLIT_BYTES",
    "PROGRESS_COUNT_MAX",
    "RocketMQBatchReader",
    "RocketMQDataSource",
    "RocketMQStreamReader",
    "read_partition",
    "register",
]

FORMAT_NAME = "rocketmq"


def register(spark: SparkSession) -> None:
    """Make ``format("rocketmq")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(RocketMQDataSource)


_F = TypeVar("_F", bound=Callable[..., Any])
_KNOWN = {
    name.lower()
    for name in (*OPTION_NAMES, *SINK_OPTION_NAMES, *KAFKA_SINK_EQUIVALENT, *SPARK_TABLE_KEYS)
}


def _one_line(method: _F) -> _F:
    """Our errors, raised in the Python worker Spark plans the query in, reach the user as one
    line: PySpark prints a worker's error without its traceback when ``SPARK_HIDE_TRACEBACK``
    is set. Set only as our error leaves: the worker exits after reporting any error, so
    nobody else's traceback is hidden. Outside a Spark worker nothing changes."""

    @wraps(method)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except RmqError:
            if os.environ.get("SPARK_PYTHON_RUNTIME") == "PYTHON_WORKER":
                os.environ["SPARK_HIDE_TRACEBACK"] = "1"
            raise

    return checked  # type: ignore[return-value]


class RocketMQDataSource(DataSource):
    """``format("rocketmq")``: reads a store's CommitLog segments directly (no broker);
    writes through a broker or into a store (``sink.py``)."""

    @_one_line
    def __init__(self, options: dict[str, str]) -> None:
        # The first Python call of every query (with .schema(...) Spark skips schema() and
        # builds the source when it plans): a name neither the source nor the sink has fails
        # here, before any reader or writer. A Kafka sink option is left to writer()'s hint.
        super().__init__(options)
        expose_py_files_to_stream_runner()
        for key in options:
            lower = str(key).lower()
            if lower not in _KNOWN and not lower.startswith(("store.", "broker.")):
                raise unknown_read_or_write_option(str(key), OPTION_NAMES, SINK_OPTION_NAMES)

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    @_one_line
    def schema(self) -> StructType:
        check_options(self.options)  # at load(): one clear line, for read and readStream
        if _over_cluster(self.options):  # discovers now: a bad namesrv fails at load()
            from rmq_spark.spark.cluster_reader import cluster_schema

            return cluster_schema(_parsed_either(self.options))
        return spark_schema_for(self.options.get("path", ""))

    @_one_line
    def reader(self, schema: StructType) -> DataSourceReader:
        if _over_cluster(self.options):
            from rmq_spark.spark.cluster_reader import cluster_batch_reader

            options = parse_options(self.options, streaming=False)
            return cluster_batch_reader(options, schema, RocketMQBatchReader)
        stores = per_store_options(parse_options(self.options, streaming=False))
        arrow, inner = query_schemas(schema, several=len(stores) > 1)
        if len(stores) == 1:
            return RocketMQBatchReader(next(iter(stores.values())), inner)
        readers = {path: RocketMQBatchReader(options, inner) for path, options in stores.items()}
        return MultiStoreBatchReader(readers, arrow)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            return self._stream_reader(schema)
        except RmqError as err:
            # PySpark's stream runner cannot report an error of streamReader() (it ends in an
            # UnboundLocalError of its own): the query fails at its first call instead.
            return _RefusedStreamReader(err)

    @_one_line
    def _stream_reader(self, schema: StructType) -> DataSourceStreamReader:
        if _over_cluster(self.options):
            from rmq_spark.spark.cluster_reader import cluster_stream_reader

            return cluster_stream_reader(parse_options(self.options, streaming=True), schema)
        stores = per_store_options(parse_options(self.options, streaming=True))
        arrow, inner = query_schemas(schema, several=len(stores) > 1)
        if len(stores) == 1:
            return stream_reader(next(iter(stores.values())), inner)
        readers = {path: stream_reader(options, inner) for path, options in stores.items()}
        return MultiStoreStreamReader(readers, arrow)

    @_one_line
    def writer(self, schema: StructType, overwrite: bool) -> RocketMQBatchWriter:
        from rmq_spark.spark.sink import batch_writer

        return batch_writer(dict(self.options), schema, overwrite)  # the sink: sink.py

    @_one_line
    def streamWriter(self, schema: StructType, overwrite: bool) -> RocketMQStreamWriter:
        from rmq_spark.spark.sink import stream_writer

        return stream_writer(dict(self.options), schema, overwrite)


def _over_cluster(options: dict[str, str]) -> bool:
    return any(str(key).lower() == "namesrv" for key in options)


def _parsed_either(options: dict[str, str]) -> SourceOptions:
    """The options as a stream's, or a batch's (``schema`` does not know which it serves)."""
    try:
        return parse_options(options, streaming=True)
    except SourceError:
        return parse_options(options, streaming=False)


class _RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream whose options were refused: every call Spark makes raises that error (with
    every trigger: the first call may be prepareForTriggerAvailableNow)."""

    def __init__(self, error: RmqError) -> None:
        self.error = error

    @_one_line
    def _refuse(self, *args: Any) -> Any:
        raise self.error

    initialOffset = latestOffset = partitions = read = prepareForTriggerAvailableNow = _refuse

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        pass


# --- batch ------------------------------------------------------------------------------------


class RocketMQBatchReader(DataSourceReader):
    """``spark.read.format("rocketmq")``: one plan over ``[start, end)`` fixed at planning."""

    def __init__(self, options: SourceOptions, schema: pa.Schema = ARROW_SCHEMA) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> list[LogPartition]:
        view = open_view(self.options)
        end = planner.readable_end(view)
        start = resolve_start(view, self.options, end)
        stop = resolve_batch_end(view, self.options, start, end)
        if start > stop:
            raise SourceError(
                f"the starting offset {start} is after the ending offset {stop}; "
                "check startingOffsets/startingTimestamp against endingOffsets/endingTimestamp"
            )
        return plan(view, self.options, start, stop, [])

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.options, self.schema)
