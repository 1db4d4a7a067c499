"""Lookups over the reput tables without a JVM: by key and by store time, in well under a second.

``query.py`` answers the same questions as Spark DataFrames (for notebooks and SQL); a
command-line lookup (``rmq-spark query --key``, RocketMQ's ``mqadmin queryMsgByKey``) should
not pay a JVM's start for one message, so this module reads the same Delta tables with
``deltalake`` (delta-rs: the table's current files from its log, checkpoints included) and
pyarrow's dataset scanner over those files, whose filters skip Parquet row groups by their
statistics (the tables are written in log order, so ``physical_offset`` and
``store_timestamp`` ranges are tight). The same filters as ``query.py``: the index is searched
by ``key_hash`` and then the real topic and key, so a hash collision never leaks through.
Only numeric columns go to the scanner (a string longer than a statistics prefix has no
usable min/max); topics and keys are compared after the scan. Tables built from several
stores (a ``store`` column) pair an index hit with the message of the same store: physical
offsets repeat across stores.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from rmq_spark.errors import TableError
from rmq_spark.spark.tables import MESSAGE_INDEX, MESSAGES, STORE_COLUMN, table_path
from rmq_spark.store.hashing import index_key_hash

__all__ = ["local_messages_by_key", "local_messages_by_time"]


def _dataset(tables_dir: str | Path, name: str) -> ds.Dataset:
    """The table's current Parquet files (from its Delta log) as a local-filesystem dataset.

    Not ``DeltaTable.to_pyarrow_dataset()``: that one reads through a Python filesystem
    handler, and pyarrow's I/O threads still calling into it while the interpreter exits
    abort the process (``terminate called without an active exception``, exit 134) after
    the answer was printed, about one run in eight on a busy machine."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    path = table_path(tables_dir, name)
    try:
        table = DeltaTable(str(path))
    except TableNotFoundError:
        raise TableError(f"{path} is not a Delta table: run `rmq-spark reput` first") from None
    schema = pa.schema(table.schema().to_arrow())
    return ds.dataset(table.file_uris(), schema=schema, format="parquet")


def _ms(value: int) -> pa.Scalar:
    return pa.scalar(datetime.fromtimestamp(value / 1000, UTC), pa.timestamp("us", tz="UTC"))


def _time_filter(begin_ms: int | None, end_ms: int | None) -> ds.Expression | None:
    found: ds.Expression | None = None
    if begin_ms is not None:
        found = ds.field("store_timestamp") >= _ms(begin_ms)
    if end_ms is not None:
        upper = ds.field("store_timestamp") < _ms(end_ms)
        found = upper if found is None else found & upper
    return found


def _both(a: ds.Expression, b: ds.Expression | None) -> ds.Expression:
    return a if b is None else a & b


def _where(table: pa.Table, column: str, value: str) -> pa.Table:
    return table.filter(pc.equal(table.column(column), value))


def local_messages_by_key(
    tables_dir: str | Path,
    topic: str,
    key: str,
    *,
    begin_ms: int | None = None,
    end_ms: int | None = None,
) -> pa.Table:
    """``query.messages_by_key`` without Spark: ``messages`` rows in log order."""
    index_set = _dataset(tables_dir, MESSAGE_INDEX)
    several = STORE_COLUMN in index_set.schema.names
    hits = index_set.to_table(
        columns=["topic", "key", "physical_offset", "store_timestamp"]
        + ([STORE_COLUMN] if several else []),
        filter=_both(
            ds.field("key_hash") == index_key_hash(f"{topic}#{key}"),
            _time_filter(begin_ms, end_ms),
        ),
    )
    index = _where(_where(hits, "topic", topic), "key", key)
    messages = _dataset(tables_dir, MESSAGES)
    if index.num_rows == 0:
        return messages.schema.empty_table()
    offsets = pc.unique(index.column("physical_offset"))
    times = index.column("store_timestamp")
    found = messages.to_table(
        filter=(ds.field("store_timestamp") >= pc.min(times))
        & (ds.field("store_timestamp") <= pc.max(times))
        & ds.field("physical_offset").isin(offsets)
    )
    found = _where(found, "topic", topic)
    if several:
        found = found.filter(pc.is_in(_store_and_offset(found), _store_and_offset(index)))
    return _log_order(found)


def _store_and_offset(table: pa.Table) -> pa.Array:
    """``store|physical_offset`` per row: a message's identity over several stores."""
    offsets = pc.cast(table.column("physical_offset"), pa.string())
    return pc.binary_join_element_wise(table.column(STORE_COLUMN), offsets, "|")


def _log_order(table: pa.Table) -> pa.Table:
    """Log order: by physical offset, within each store for tables of several stores."""
    if STORE_COLUMN in table.schema.names:
        return table.sort_by([(STORE_COLUMN, "ascending"), ("physical_offset", "ascending")])
    return table.sort_by("physical_offset")


def local_messages_by_time(
    tables_dir: str | Path,
    topic: str,
    begin_ms: int | None = None,
    end_ms: int | None = None,
) -> pa.Table:
    """``query.messages_by_time`` without Spark: ``messages`` rows of ``topic`` stored in
    ``[begin_ms, end_ms)`` (either end open), in log order."""
    dataset = _dataset(tables_dir, MESSAGES)
    window = _time_filter(begin_ms, end_ms)
    found = dataset.to_table() if window is None else dataset.to_table(filter=window)
    return _log_order(_where(found, "topic", topic))
