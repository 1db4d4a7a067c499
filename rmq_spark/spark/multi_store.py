"""Several stores in one query: ``load("/s1,/s2")`` (one store per broker).

What a cluster of brokers looks like to Spark: each broker writes its own store, and one
query reads them all. A reader over several stores is a composition of the one-store readers
(``RocketMQBatchReader``, ``RocketMQStreamReader``), one per store, each with its own options
(``path`` replaced): offsets, planning, admission control and commits stay theirs. This module
owns only what is shared: the offset shape ``{"stores": {path: <one store's offset>}}``,
splitting an admission limit between stores, tagging partitions with their store, and the
extra column ``store`` (the path as given) that says which store each row came from. A query
over one store keeps its offset shape and schema (no ``store`` column).

An admission limit (``maxMessagesPerTrigger`` / ``maxBytesPerTrigger``) is for the whole
query: each trigger gives every store an equal share (rounded up), so a busy store never
starves the others. Explicit ``startingOffsets``/``endingOffsets`` JSON names one store's
offsets (per-queue JSON one store's queues: a queue is a broker's), so with several stores
only ``earliest``/``latest`` and the whole-log timestamp options apply.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from rmq_spark.errors import SourceError
from rmq_spark.spark.options import EndingMode, SourceOptions, StartingMode
from rmq_spark.spark.schema import arrow_schema_for, spark_schema
from rmq_spark.store.paths import local_fs_path

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "MultiStoreBatchReader",
    "MultiStoreStreamReader",
    "STORE_COLUMN",
    "StorePartition",
    "check_several",
    "per_store_options",
    "query_schemas",
    "share",
    "spark_schema_for",
    "split_paths",
    "tag_partitions",
    "tagged",
]

STORE_COLUMN = "store"
_STORES_KEY = "stores"


def split_paths(path: str) -> tuple[str, ...]:
    """The stores a ``path`` option names: one, or several separated by commas; each a local
    path or a ``file://`` URI."""
    parts = tuple(part.strip() for part in path.split(","))
    if any(not part for part in parts):
        raise SourceError(f"path {path!r}: an empty store path between commas")
    try:
        paths = tuple(str(local_fs_path(part)) for part in parts)  # file:// URIs too
    except ValueError as err:
        raise SourceError(f"path {err}") from None
    if len(set(paths)) != len(paths):
        raise SourceError(f"path {path!r}: a store is named twice")
    return paths


def per_store_options(options: SourceOptions) -> dict[str, SourceOptions]:
    """One store's options per store named by ``options.path`` (several: checked)."""
    paths = split_paths(options.path)
    if len(paths) > 1:
        check_several(options)
    return {path: dataclasses.replace(options, path=path) for path in paths}


def check_several(options: SourceOptions) -> None:
    """Refuse what names one store's offsets or queues in a query over several stores."""
    if options.starting_mode in (StartingMode.OFFSET, StartingMode.QUEUES):
        raise SourceError(
            "startingOffsets as JSON (or per-queue positions) names one store's offsets "
            "or queues; with several stores use earliest, latest or startingTimestamp"
        )
    if options.ending_mode in (EndingMode.OFFSET, EndingMode.QUEUES):
        raise SourceError(
            "endingOffsets as JSON (or per-queue positions) names one store's offsets "
            "or queues; with several stores use latest or endingTimestamp"
        )


def spark_schema_for(path: str) -> StructType:
    """The source's Spark schema for a ``path`` option: with a ``store`` column when it names
    several stores."""
    from pyspark.sql.types import StringType, StructField

    schema = spark_schema()
    if len(split_paths(path)) > 1:
        schema = schema.add(StructField(STORE_COLUMN, StringType(), nullable=False))
    return schema


def query_schemas(
    schema: StructType, several: bool, column: str = STORE_COLUMN
) -> tuple[pa.Schema, pa.Schema]:
    """The Arrow schema a query produces for a Spark ``schema`` and the one each store's
    reader produces (without the tag ``column``, which only queries over several stores
    have; its place in ``schema`` is kept)."""
    from pyspark.sql.types import StructType

    names = [field.name for field in schema.fields]
    if not several or column not in names:
        arrow = arrow_schema_for(schema)  # refuses "store" for one store: not a column
        return arrow, arrow
    rest = StructType([field for field in schema.fields if field.name != column])
    inner = arrow_schema_for(rest) if rest.fields else pa.schema([])
    index = names.index(column)
    nullable = schema.fields[index].nullable  # Spark compares nullability too
    arrow = inner.insert(index, pa.field(column, pa.string(), nullable))
    if not rest.fields:  # only the store column was asked for: read the cheapest one
        inner = pa.schema([pa.field("physical_offset", pa.int64(), nullable=False)])
    return arrow, inner


@dataclass(frozen=True)
class StorePartition(InputPartition):
    """One store's partition, tagged with the store it belongs to."""

    store: str
    inner: InputPartition


def tagged(
    batches: Iterator[pa.RecordBatch], store: str, schema: pa.Schema, column: str = STORE_COLUMN
) -> Iterator[pa.RecordBatch]:
    """``batches`` of one store with the tag ``column`` (``store``) added, in ``schema``."""
    for batch in batches:
        columns = {name: batch.column(name) for name in batch.schema.names}
        columns[column] = pa.repeat(pa.scalar(store, pa.string()), batch.num_rows)
        yield pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


class _Reads:
    """Reading a tagged partition with its store's reader (shared by batch and stream)."""

    schema: pa.Schema
    _readers: Mapping[str, DataSourceReader | DataSourceStreamReader]
    _tag: bool

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, StorePartition):
            return iter(())  # Spark's stand-in partition for an empty read
        batches = self._readers[partition.store].read(partition.inner)
        if not self._tag:
            return iter(batches)
        return tagged(iter(batches), partition.store, self.schema)


def tag_partitions(store: str, partitions: Sequence[InputPartition]) -> list[StorePartition]:
    return [StorePartition(store, partition) for partition in partitions]


class MultiStoreBatchReader(_Reads, DataSourceReader):
    """``spark.read.format("rocketmq").load("/s1,/s2")``: each store read to its end."""

    def __init__(self, readers: Mapping[str, DataSourceReader], schema: pa.Schema) -> None:
        self._readers = dict(readers)
        self.schema = schema
        self._tag = STORE_COLUMN in schema.names

    def partitions(self) -> list[StorePartition]:
        planned: list[StorePartition] = []
        for store, reader in self._readers.items():
            planned += tag_partitions(store, reader.partitions())
        return planned


def share(limit: ReadLimit, stores: int) -> ReadLimit:
    """One store's share of a query-wide admission limit."""
    if isinstance(limit, ReadMaxRows):
        return ReadMaxRows(math.ceil(limit.max_rows / stores))
    if isinstance(limit, ReadMaxBytes):
        return ReadMaxBytes(math.ceil(limit.max_bytes / stores))
    return limit


class MultiStoreStreamReader(_Reads, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("rocketmq").load("/s1,/s2")``: offsets per store."""

    def __init__(self, readers: Mapping[str, DataSourceStreamReader], schema: pa.Schema) -> None:
        self._readers = dict(readers)
        self.schema = schema
        self._tag = STORE_COLUMN in schema.names

    def _split(self, offset: Mapping[str, object] | None, what: str) -> dict[str, dict]:
        stores = offset.get(_STORES_KEY) if isinstance(offset, Mapping) else None
        if not isinstance(stores, Mapping) or set(stores) != set(self._readers):
            raise SourceError(
                f"{what} {offset!r} is not an offset of this query's stores "
                f"{sorted(self._readers)} (a checkpoint of another query or store list?)"
            )
        return {store: dict(value) for store, value in stores.items()}

    @staticmethod
    def _join(offsets: Mapping[str, dict]) -> dict:
        return {_STORES_KEY: dict(offsets)}

    def initialOffset(self) -> dict:
        return self._join({s: r.initialOffset() for s, r in self._readers.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        first = next(iter(self._readers.values()))
        limit = first.getDefaultReadLimit()  # the same options for every store
        if isinstance(limit, (ReadMaxRows, ReadMaxBytes)):
            return limit
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begins = self._split(start, "start offset")
        each = share(limit, len(self._readers))
        return self._join({s: r.latestOffset(begins[s], each) for s, r in self._readers.items()})

    def reportLatestOffset(self) -> dict:
        return self._join({s: r.reportLatestOffset() for s, r in self._readers.items()})

    def prepareForTriggerAvailableNow(self) -> None:
        for reader in self._readers.values():
            reader.prepareForTriggerAvailableNow()

    def partitions(self, start: dict, end: dict) -> list[StorePartition]:
        begins, ends = self._split(start, "start offset"), self._split(end, "end offset")
        planned: list[StorePartition] = []
        for store, reader in self._readers.items():
            planned += tag_partitions(store, reader.partitions(begins[store], ends[store]))
        return planned

    def commit(self, end: dict) -> None:
        for store, offset in self._split(end, "committed offset").items():
            self._readers[store].commit(offset)

    def metrics(self, latest_consumed_offset: dict | None = None) -> dict[str, str]:
        consumed = (
            self._split(latest_consumed_offset, "consumed offset")
            if latest_consumed_offset is not None
            else {}
        )
        result: dict[str, str] = {}
        for store, reader in self._readers.items():
            for key, value in reader.metrics(consumed.get(store)).items():
                result[f"{store}:{key}"] = value
        return result

    def stop(self) -> None:
        for reader in self._readers.values():
            reader.stop()
