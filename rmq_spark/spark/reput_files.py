"""The reput job's data files: one log range -> Parquet files of the three tables.

A micro-batch's log range is cut into the source's partitions (``partitions.plan``); each
partition is decoded into Arrow (``partitions.read_partition``, every record checked as the
``rocketmq`` source checks it), turned into rows of each table (``reput_rows.py``) and written
as one new data file per table (``delta_files.py``), in one pass, on an executor (or on the
driver for a small batch). What comes back are the files' Delta ``add`` actions, which the
driver commits (``reput.py``). A failed task deletes its files; a file whose task succeeded
but whose batch never commits stays unreferenced (Delta ignores it; VACUUM removes it).
A task reads one store and lays its rows out as the tables' store layout says (over several
stores: a ``store`` column on every table's rows, ``tables.StoreOfSeveral``).
Does not own the stream, the commits or the row logic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.spark.delta_files import DataFileWriter
from rmq_spark.spark.options import SourceOptions
from rmq_spark.spark.partitions import LogPartition, read_partition
from rmq_spark.spark.reput_rows import (
    CONSUME_QUEUE_SCHEMA,
    MESSAGE_INDEX_SCHEMA,
    consume_queue_rows,
    message_index_rows,
)
from rmq_spark.spark.schema import ARROW_SCHEMA
from rmq_spark.spark.tables import (
    CONSUME_QUEUE,
    MESSAGE_INDEX,
    MESSAGES,
    ONE_STORE,
    STORE_COLUMN,
    StoreLayout,
    table_path,
)

__all__ = [
    "DICTIONARY_COLUMNS",
    "FILE_SCHEMAS",
    "PartitionFiles",
    "ReputFileTask",
    "file_schema",
    "file_schema_json",
    "run_partitions",
    "write_partition_files",
]

FILE_SCHEMAS: Mapping[str, pa.Schema] = {
    MESSAGES: ARROW_SCHEMA,
    MESSAGE_INDEX: MESSAGE_INDEX_SCHEMA,
    CONSUME_QUEUE: CONSUME_QUEUE_SCHEMA,
}
"""The Arrow schema of each table's data files (equal to its DDL: a test checks it)."""

DICTIONARY_COLUMNS: Mapping[str, tuple[str, ...]] = {
    MESSAGES: (
        "topic",
        "queue_id",
        "total_size",
        "body",
        "tags",
        "properties.key_value.key",
        "born_host",
        "store_host",
        "sys_flag",
        "flag",
        "reconsume_times",
        "body_crc",
        "transaction_type",
        "delay_level",
        STORE_COLUMN,
    ),
    MESSAGE_INDEX: ("topic", "key_type", STORE_COLUMN),
    CONSUME_QUEUE: ("topic", "queue_id", "total_size", "tags_code", STORE_COLUMN),
}
"""Each table's Parquet columns written with a dictionary, as Spark's writer writes every
column: all but those unique by construction (ids, keys, offsets, times), where a dictionary
never pays and building it cost a third of the ``messages`` file's write. Bodies keep theirs:
it shrinks repeated payloads many times over and, on unique ones, gives up after its first
page."""


def file_schema(name: str, layout: StoreLayout = ONE_STORE) -> pa.Schema:
    """Table ``name``'s file schema in ``layout`` (several stores: the ``store`` column last)."""
    return layout.arrow_schema(FILE_SCHEMAS[name])


def file_schema_json(name: str, layout: StoreLayout = ONE_STORE) -> str:
    """Table ``name``'s file schema as a Spark ``StructType`` JSON (what a commit checks the
    table's schema against)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return str(from_arrow_schema(file_schema(name, layout)).json())


@dataclass(frozen=True, slots=True)
class ReputFileTask:
    """What every partition of one batch needs (pickled to the executors)."""

    options: SourceOptions  # the source options the range is read with (store path, checks)
    tables_dir: str
    floors: Mapping[str, int]  # per pending table: rows below this physical offset are kept out
    delay_levels_ms: tuple[int, ...]
    layout: StoreLayout = ONE_STORE  # the store's rows in the tables (a ``store`` column?)


@dataclass(slots=True)
class PartitionFiles:
    """What one partition wrote: ``add`` actions per table, and the messages it decoded."""

    adds: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    messages: int = 0


def _rows_for(name: str, batch: pa.Table, task: ReputFileTask) -> pa.Table:
    floor = task.floors[name]
    if floor > 0:
        batch = batch.filter(pc.greater_equal(batch.column("physical_offset"), floor))
    if name == CONSUME_QUEUE:
        rows = consume_queue_rows(batch, task.delay_levels_ms)
    elif name == MESSAGE_INDEX:
        rows = message_index_rows(batch)
    else:
        rows = batch
    return task.layout.tag(rows)


def write_partition_files(task: ReputFileTask, partition: LogPartition) -> PartitionFiles:
    """Decode ``partition`` and write one data file per pending table (none for no rows).

    Raises
    ------
    CorruptRecordError, DataLossError
        As the ``rocketmq`` source raises them for the same range (no file is left).
    TableError
        A data file cannot be written (no file is left).
    """
    writers = {
        name: DataFileWriter(
            table_path(task.tables_dir, name),
            file_schema(name, task.layout),
            DICTIONARY_COLUMNS[name],
        )
        for name in task.floors
    }
    result = PartitionFiles()
    try:
        for batch in read_partition(partition, task.options):
            rows = pa.Table.from_batches([batch])
            result.messages += rows.num_rows
            for name, writer in writers.items():
                writer.write(_rows_for(name, rows, task))
        for name, writer in writers.items():
            add = writer.close()
            if add is not None:
                result.adds.setdefault(name, []).append(add)
    except BaseException:
        for writer in writers.values():
            writer.abandon()
        raise
    return result


def run_partitions(task: ReputFileTask, partitions: Iterable[LogPartition]) -> list[PartitionFiles]:
    """``write_partition_files`` over partitions (the body of one Spark task)."""
    return [write_partition_files(task, partition) for partition in partitions]
