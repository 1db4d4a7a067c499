"""Streaming micro-batches read on the driver: the ``driverReadMaxBytes`` option.

A micro-batch normally costs one Spark task per partition, and every task runs ``read`` in a
Python worker on an executor. For the small batches of a low-latency query (a trigger of 0 s
over a log that grows by a few KiB between triggers) that round trip is most of the batch's
time. PySpark's streaming-source process can instead hand Spark Arrow batches it already
holds ("prefetched records", the path of its ``SimpleDataSourceStreamReader``): Spark stores
them in the driver's block manager and the batch's single task reads them from there, with
no Python worker.

PySpark only takes that path for readers that are instances of its private
``_SimpleStreamReaderWrapper``, so ``DriverReadStreamReader`` derives from it *and* from
``RocketMQStreamReader`` (whose methods win in the MRO: offsets, admission control and
``Trigger.AvailableNow`` stay the same). Nothing is cached across batches: ``getCache``
reads ``[start, end)`` from the log when Spark plans the batch, so a batch replayed after a
restart reads the same records, and never past the durable end (``end`` came from
``latestOffset``). Batches larger than ``driverReadMaxBytes`` are planned and read on the
executors as usual.

Cost of the option: PySpark does not ask wrapped readers for ``reportLatestOffset``, so the
query progress shows no ``latestOffset`` (``metrics()`` still gives the durable end).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pyarrow as pa

from rmq_spark.errors import SourceError
from rmq_spark.spark.offsets import parse_offset
from rmq_spark.spark.options import SourceOptions
from rmq_spark.spark.partitions import LogPartition, plan, read_partition
from rmq_spark.spark.stream import RocketMQStreamReader

try:  # private in PySpark 4.x; the option fails clearly if a release drops it
    from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper
except ImportError:  # pragma: no cover - depends on the installed PySpark
    _SimpleStreamReaderWrapper = None

__all__ = ["DriverReadStreamReader", "stream_reader"]


def stream_reader(options: SourceOptions, schema: pa.Schema) -> RocketMQStreamReader:
    """The stream reader for ``options``: driver reads when ``driverReadMaxBytes`` > 0."""
    if not options.driver_read_max_bytes:
        return RocketMQStreamReader(options, schema)
    if _SimpleStreamReaderWrapper is None:  # pragma: no cover - depends on PySpark
        raise SourceError(
            "option driverReadMaxBytes needs PySpark's prefetched-records path "
            "(pyspark.sql.datasource_internal._SimpleStreamReaderWrapper), missing in this "
            "PySpark; remove the option"
        )
    return DriverReadStreamReader(options, schema)


_Base = _SimpleStreamReaderWrapper if _SimpleStreamReaderWrapper is not None else object


class DriverReadStreamReader(RocketMQStreamReader, _Base):  # type: ignore[misc, valid-type]
    """``RocketMQStreamReader`` whose small batches are read in the driver's source process."""

    def __init__(self, options: SourceOptions, schema: pa.Schema) -> None:
        RocketMQStreamReader.__init__(self, options, schema)
        # PySpark's process asks `simple_reader` for Trigger.AvailableNow support.
        self.simple_reader = self
        self.cache: list = []  # the wrapper's prefetch cache; never filled here
        self._planned: tuple[int, int, list[LogPartition]] | None = None  # the last plan

    def _small(self, begin: int, stop: int) -> bool:
        return 0 < stop - begin <= self.options.driver_read_max_bytes

    def partitions(self, start: dict, end: dict) -> list[LogPartition]:
        begin = parse_offset(start, what="start offset")
        stop = parse_offset(end, what="end offset")
        planned = plan(self._view_for(stop), self.options, begin, stop, self.skipped_ranges)
        if self._small(begin, stop) and len(planned) > 1:
            # Spark requires exactly one partition next to prefetched records.
            pieces = tuple(piece for part in planned for piece in part.slices)
            planned = [replace(planned[0], slices=pieces, index=0)]  # keeps queue_bounds
        self._planned = (begin, stop, planned)
        return planned

    def getCache(self, start: dict, end: dict) -> Iterator[pa.RecordBatch] | None:
        """Spark's hook right after ``partitions``: the batch's rows, or ``None`` to let
        executors read it. Reads the log now; nothing is kept between batches.
        """
        begin = parse_offset(start, what="start offset")
        stop = parse_offset(end, what="end offset")
        if not self._small(begin, stop):
            return None
        if self._planned is None or self._planned[:2] != (begin, stop):
            self.partitions(start, end)
        planned = self._planned[2] if self._planned is not None else []
        if len(planned) != 1:
            return None
        return read_partition(planned[0], self.options, self.schema)

    def commit(self, end: dict) -> None:
        RocketMQStreamReader.commit(self, end)
