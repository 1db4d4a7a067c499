"""Every store of a RocketMQ cluster in one query: ``option("namesrv", "h:p;h:p")``.

The brokers and their stores come from ``cluster_discovery.discover``; reading them is the
several-stores reader's (``multi_store.py``), keyed by broker name instead of path: rows get a
``broker_name`` column (not ``store``: a broker's name is what RocketMQ routes, offsets and
tools call it, and it stays when its store moves), and the offset is
``{"brokers": {name: {"physical_offset": N}}, "stores": {name: path}}``: each broker's store
path is kept with its position, so a batch Spark runs again after a restart reads a broker
that has left the cluster meanwhile from the files alone (checked as discovery checks them).

A streaming query discovers again at every trigger (``CACHE_S`` apart at most). A broker that
was not in the start offset (it joined, or the query restarted after it joined) is read from
its earliest offset, whatever ``startingOffsets`` says; a broker that left keeps its offset in
every later offset and is read again from there when it comes back. A discovery that fails
mid-query (name servers down, a refused store) is logged and the known brokers are read on;
at ``load()`` it is an error.

Executors read the partitions' files themselves: each checks the store is readable on its
host first (``check_readable_here``), so a store the driver sees but an executor does not
fails in one line naming both.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit

from rmq_spark.errors import SourceError
from rmq_spark.spark.cluster_discovery import (
    BROKER_COLUMN,
    check_readable_here,
    check_store,
    discover,
)
from rmq_spark.spark.driver_read import stream_reader
from rmq_spark.spark.multi_store import (
    MultiStoreBatchReader,
    MultiStoreStreamReader,
    StorePartition,
    check_several,
    query_schemas,
    share,
    tag_partitions,
    tagged,
)
from rmq_spark.spark.options import SourceOptions, StartingMode
from rmq_spark.spark.partitions import read_partition
from rmq_spark.spark.schema import spark_schema

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "ClusterBatchReader",
    "ClusterStreamReader",
    "cluster_batch_reader",
    "cluster_schema",
    "cluster_stream_reader",
]

log = logging.getLogger(__name__)
_BROKERS_KEY = "brokers"
_STORES_KEY = "stores"


def _checked(options: SourceOptions) -> SourceOptions:
    check_several(options)
    if options.consumer_group:
        raise SourceError(
            "option consumerGroup commits to one broker (option brokers); it does not go "
            "with namesrv"
        )
    return options


def cluster_schema(options: SourceOptions) -> StructType:
    """The source's schema plus ``broker_name``; discovers now, so a bad ``namesrv`` fails
    at ``load()``."""
    from pyspark.sql.types import StringType, StructField

    discover(_checked(options))
    return spark_schema().add(StructField(BROKER_COLUMN, StringType(), nullable=False))


class _ClusterReads:
    """Reading a partition on an executor: needs only the options and the partition."""

    schema: pa.Schema
    _options: SourceOptions
    _inner: pa.Schema

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, StorePartition):
            return iter(())  # Spark's stand-in partition for an empty read
        store_dir = getattr(partition.inner, "store_dir", "")
        if store_dir:
            check_readable_here(partition.store, store_dir)
        batches = read_partition(partition.inner, self._options, self._inner)
        if BROKER_COLUMN not in self.schema.names:
            return iter(batches)
        return tagged(iter(batches), partition.store, self.schema, BROKER_COLUMN)


class ClusterBatchReader(_ClusterReads, MultiStoreBatchReader):
    """``spark.read.format("rocketmq").option("namesrv", ...).load()``."""

    def __init__(
        self,
        readers: Mapping[str, DataSourceReader],
        schema: pa.Schema,
        options: SourceOptions,
        inner: pa.Schema,
    ) -> None:
        MultiStoreBatchReader.__init__(self, readers, schema)
        self._options, self._inner = options, inner


def cluster_batch_reader(
    options: SourceOptions, schema: StructType, make: type[DataSourceReader]
) -> ClusterBatchReader:
    """A batch reader over every discovered store; ``make(options, schema)`` reads one."""
    arrow, inner = query_schemas(schema, several=True, column=BROKER_COLUMN)
    stores = discover(_checked(options))
    readers = {
        name: make(dataclasses.replace(options, path=store.path), inner)  # type: ignore[call-arg]
        for name, store in stores.items()
    }
    return ClusterBatchReader(readers, arrow, options, inner)


def cluster_stream_reader(options: SourceOptions, schema: StructType) -> ClusterStreamReader:
    arrow, inner = query_schemas(schema, several=True, column=BROKER_COLUMN)
    return ClusterStreamReader(_checked(options), arrow, inner)


class ClusterStreamReader(_ClusterReads, MultiStoreStreamReader):
    """``spark.readStream.format("rocketmq").option("namesrv", ...).load()``: brokers may
    join and leave between triggers."""

    def __init__(self, options: SourceOptions, schema: pa.Schema, inner: pa.Schema) -> None:
        self._options, self._inner = options, inner
        self._paths: dict[str, str] = {}
        self._joined: dict[str, dict] = {}  # start offsets of brokers missing from a start
        self._available_now = False
        self._problem = ""  # the last discovery failure logged (once per change)
        MultiStoreStreamReader.__init__(self, {}, schema)
        stores = discover(options)
        self._live = set(stores)
        for name, store in stores.items():
            self._add(name, store.path)

    def _add(self, name: str, path: str) -> None:
        self._paths[name] = path
        reader = stream_reader(dataclasses.replace(self._options, path=path), self._inner)
        self._readers[name] = reader
        if self._available_now:
            reader.prepareForTriggerAvailableNow()

    def _refresh(self) -> None:
        try:
            stores = discover(self._options)
        except SourceError as err:
            if str(err) != self._problem:
                log.warning("rocketmq source: reading the known brokers on: %s", err)
            self._problem = str(err)
            return
        self._problem = ""
        for name, store in stores.items():
            if name not in self._paths:
                log.info("rocketmq source: broker %s joined (store %s)", name, store.path)
                self._add(name, store.path)
            elif store.path != self._paths[name]:
                raise SourceError(
                    f"broker {name} now reports store {store.path}, not {self._paths[name]}: "
                    "its offsets are positions in the old store; start a new query"
                )
        self._live = set(stores)

    def _split(self, offset: Mapping[str, object] | None, what: str) -> dict[str, dict]:
        brokers = offset.get(_BROKERS_KEY) if isinstance(offset, Mapping) else None
        if not isinstance(brokers, Mapping) or not all(
            isinstance(value, Mapping) for value in brokers.values()
        ):
            raise SourceError(
                f"{what} {offset!r} is not an offset of a query over name servers "
                "(a checkpoint of a query over store paths?)"
            )
        return {str(name): dict(value) for name, value in brokers.items()}

    def _join(self, offsets: Mapping[str, dict]) -> dict:
        names = sorted(offsets)
        paths = {name: self._paths[name] for name in names if name in self._paths}
        return {_BROKERS_KEY: {name: offsets[name] for name in names}, _STORES_KEY: paths}

    def _reopen(self, name: str, end: Mapping[str, object], stop: dict) -> None:
        """``name`` left the cluster but this batch reads its store up to ``stop``: read it
        from the path the batch's offset keeps (a checkpoint written before paths were kept
        has none: then the broker has to come back)."""
        stores = end.get(_STORES_KEY)
        path = stores.get(name) if isinstance(stores, Mapping) else None
        if not isinstance(path, str):
            raise SourceError(
                f"broker {name} left the cluster, and this batch reads its store up to "
                f"{stop}; bring it back (or its store) to finish the batch"
            )
        where = "this query's checkpoint"
        checked = check_store(name, where, path, self._options.store_roots)
        owner = next((n for n, p in self._paths.items() if p == checked and n != name), None)
        if owner is not None:
            raise SourceError(
                f"{where} names store {checked} for broker {name}, but it is broker {owner}'s;"
                " two brokers never share a store"
            )
        log.info("rocketmq source: broker %s left the cluster; this batch reads its store %s",
                 name, checked)  # fmt: skip
        self._add(name, checked)

    def _begin(self, name: str, begins: Mapping[str, dict]) -> dict:
        """Where ``name`` starts: its offset in ``begins``, else (it joined) its earliest."""
        if name in begins:
            return begins[name]
        if name not in self._joined:
            earliest = dataclasses.replace(
                self._options, path=self._paths[name], starting_mode=StartingMode.EARLIEST
            )
            self._joined[name] = stream_reader(earliest, self._inner).initialOffset()
        return self._joined[name]

    def initialOffset(self) -> dict:
        return self._join({s: r.initialOffset() for s, r in self._readers.items()})

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begins = self._split(start, "start offset")
        self._refresh()
        ends = dict(begins)  # a broker that left keeps its offset
        each = share(limit, max(1, len(self._live)))
        for name in sorted(self._live):
            ends[name] = self._readers[name].latestOffset(self._begin(name, begins), each)
        return self._join(ends)

    def reportLatestOffset(self) -> dict:
        return self._join({s: self._readers[s].reportLatestOffset() for s in sorted(self._live)})

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True
        super().prepareForTriggerAvailableNow()

    def partitions(self, start: dict, end: dict) -> list[StorePartition]:
        begins, ends = self._split(start, "start offset"), self._split(end, "end offset")
        planned: list[StorePartition] = []
        for name, stop in sorted(ends.items()):
            if name not in self._readers:
                if begins.get(name) == stop:
                    continue  # left the cluster; nothing of it in this batch
                self._reopen(name, end, stop)
            begin = self._begin(name, begins)
            if begin != stop:
                planned += tag_partitions(name, self._readers[name].partitions(begin, stop))
        return planned

    def commit(self, end: dict) -> None:
        for name, offset in self._split(end, "committed offset").items():
            if name in self._readers:
                self._readers[name].commit(offset)
        self._joined = {}  # every broker is in the committed offset from now on

    def metrics(self, latest_consumed_offset: dict | None = None) -> dict[str, str]:
        consumed = (
            self._split(latest_consumed_offset, "consumed offset")
            if latest_consumed_offset is not None
            else {}
        )
        result: dict[str, str] = {}
        for name, reader in self._readers.items():
            for key, value in reader.metrics(consumed.get(name)).items():
                result[f"{name}:{key}"] = value
        return result
