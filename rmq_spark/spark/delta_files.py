"""Data files of a Delta table written from Arrow, with the statistics Delta reads.

The reput job writes its tables' Parquet files itself (pyarrow, on the executors, straight
from the decoder's Arrow batches) and commits them with ``delta_append.commit_files_once``:
no row is converted to a JVM row and back. This module owns one file: its name, its Parquet
settings (Snappy, as Spark writes them) and its Delta ``add`` action, whose ``stats`` are those
Spark's Delta writer collects (``numRecords``; ``minValues``/``maxValues`` of numbers,
timestamps and strings; ``nullCount`` of every column), so data skipping works on them as on
any Delta file. Rules that keep skipping correct: timestamps are written in milliseconds
(the log's resolution), and a string column whose smallest or largest value is longer than
Delta's 32-character stats prefix gets no min/max (Delta then reads the file for any filter on
it). Does not own commits (``delta_append.py``) or what the rows are (``reput_rows.py``).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rmq_spark.errors import TableError

__all__ = ["DataFileWriter", "STATS_STRING_PREFIX_CHARS"]

STATS_STRING_PREFIX_CHARS = 32
"""Delta's ``dataSkippingStringPrefixLength`` default: longer strings get no min/max here."""


def _stat_value(value: pa.Scalar) -> Any:
    if pa.types.is_timestamp(value.type):
        micros = value.cast(pa.int64()).as_py()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(micros // 1_000_000))
        return f"{stamp}.{micros // 1000 % 1000:03d}Z"
    return value.as_py()


def _has_min_max(dtype: pa.DataType) -> bool:
    return (
        pa.types.is_integer(dtype)
        or pa.types.is_timestamp(dtype)
        or pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
    )


class _ColumnStats:
    """Running min, max and null count of one column over the batches written."""

    def __init__(self, dtype: pa.DataType) -> None:
        self.dtype = dtype
        self.nulls = 0
        self.low: pa.Scalar | None = None
        self.high: pa.Scalar | None = None

    def add(self, column: pa.ChunkedArray | pa.Array) -> None:
        self.nulls += column.null_count
        if not _has_min_max(self.dtype) or column.null_count == len(column):
            return
        bounds = pc.min_max(column)
        low, high = bounds["min"], bounds["max"]
        if self.low is None or pc.less(low, self.low).as_py():
            self.low = low
        if self.high is None or pc.greater(high, self.high).as_py():
            self.high = high

    def bounds(self) -> tuple[Any, Any] | None:
        if self.low is None or self.high is None:
            return None
        low, high = _stat_value(self.low), _stat_value(self.high)
        if isinstance(high, str) and (
            len(high) > STATS_STRING_PREFIX_CHARS or len(low) > STATS_STRING_PREFIX_CHARS
        ):
            return None
        return low, high


class DataFileWriter:
    """One new Parquet data file in the Delta table directory ``table_dir``.

    ``write`` appends rows of ``schema`` (a row group per call); ``close`` finishes the file
    and returns its ``add`` action, or ``None`` when no row was written (no file is left).
    Nothing is visible in the table until the action is committed.

    Raises
    ------
    TableError
        The file cannot be written (the message names it), or a non-nullable column holds a
        null (Delta's NOT NULL invariant, which its own writer would enforce).
    """

    def __init__(
        self,
        table_dir: str | Path,
        schema: pa.Schema,
        dictionary_columns: tuple[str, ...] | None = None,
    ) -> None:
        self.table_dir = Path(table_dir)
        self.schema = schema
        # Parquet column paths to dictionary-encode (None: every column, pyarrow's default).
        # A dictionary only pays for repeated values: on unique ones (ids, offsets) the
        # writer builds it, overflows it and writes them plain after all.
        self._dictionary: bool | list[str] = (
            True if dictionary_columns is None else list(dictionary_columns)
        )
        self.name = f"part-{uuid.uuid4()}-c000.snappy.parquet"
        self.path = self.table_dir / self.name
        self.rows = 0
        self._stats = {field.name: _ColumnStats(field.type) for field in schema}
        self._writer: pq.ParquetWriter | None = None

    def write(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        for field in self.schema:
            column = rows.column(field.name)
            if not field.nullable and column.null_count:
                raise TableError(f"{self.path}: column {field.name} is NOT NULL but has nulls")
            self._stats[field.name].add(column)
        try:
            if self._writer is None:
                self._writer = pq.ParquetWriter(
                    str(self.path),
                    self.schema,
                    compression="snappy",
                    use_dictionary=self._dictionary,
                )
            self._writer.write_table(rows.select(self.schema.names))
        except (OSError, pa.ArrowException) as err:
            raise TableError(f"{self.path}: cannot write the data file: {err}") from err
        self.rows += rows.num_rows

    def close(self) -> dict[str, Any] | None:
        """Finish the file; its Delta ``add`` action (``None``: no rows, no file)."""
        if self._writer is None:
            return None
        try:
            self._writer.close()
            info = self.path.stat()
        except (OSError, pa.ArrowException) as err:
            raise TableError(f"{self.path}: cannot finish the data file: {err}") from err
        stats: dict[str, Any] = {"numRecords": self.rows, "minValues": {}, "maxValues": {}}
        for name, column in self._stats.items():
            bounds = column.bounds()
            if bounds is not None:
                stats["minValues"][name], stats["maxValues"][name] = bounds
        stats["nullCount"] = {name: column.nulls for name, column in self._stats.items()}
        return {
            "path": self.name,
            "partitionValues": {},
            "size": info.st_size,
            "modificationTime": int(info.st_mtime * 1000),
            "dataChange": True,
            "stats": json.dumps(stats, separators=(",", ":"), ensure_ascii=False),
        }

    def abandon(self) -> None:
        """Close and delete a file that will not be committed (a failed task)."""
        if self._writer is not None:
            try:
                self._writer.close()
            except (OSError, pa.ArrowException):
                pass
        self.path.unlink(missing_ok=True)
