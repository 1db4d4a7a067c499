"""Data files of a Delta table written from Arrow, with the statistics Delta reads.

The reput job writes its tables' Parquet files itself (pyarrow, on the executors, straight
from the decoder's Arrow batches) and commits them with ``delta_append.commit_files_once``:
no row is converted to a JVM row and back. This module owns one file: its name, its Parquet
settings (Snappy, as Spark writes them) and its Delta ``add`` action, whose ``stats`` are those
Spark's Delta writer collects (``numRecords``; ``minValues``/``maxValues`` of numbers,
timestamps and strings; ``nullCount`` of every column), so data skipping works on them as on
any Delta file. The bounds are read from the statistics Parquet's writer computes for the
file's footer anyway, not computed a second time. Rules that keep skipping correct:
timestamps are written in milliseconds (the log's resolution), and a string column whose
smallest or largest value is longer than Delta's 32-character stats prefix gets no min/max
(Delta then reads the file for any filter on it). Does not own commits (``delta_append.py``)
or what the rows are (``reput_rows.py``).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rmq_spark.errors import TableError

__all__ = ["DataFileWriter", "STATS_STRING_PREFIX_CHARS"]

STATS_STRING_PREFIX_CHARS = 32
"""Delta's ``dataSkippingStringPrefixLength`` default: longer strings get no min/max here."""


_MICROS_PER_UNIT = {"milliseconds": 1000, "microseconds": 1}
_NANOS = "nanoseconds"


def _has_min_max(dtype: pa.DataType) -> bool:
    # Delta has no unsigned types; Parquet would keep an unsigned 64-bit value's bits signed.
    return (
        pa.types.is_signed_integer(dtype)
        or pa.types.is_timestamp(dtype)
        or pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
    )


def _timestamp_text(raw: int, unit: str) -> str:
    micros = raw // 1000 if unit == _NANOS else raw * _MICROS_PER_UNIT[unit]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(micros // 1_000_000))
    return f"{stamp}.{micros // 1000 % 1000:03d}Z"


def _stat_bounds(raw_low: Any, raw_high: Any, column: pq.ColumnSchema) -> tuple[Any, Any] | None:
    """Delta's JSON min/max of one column from Parquet's raw statistics (None: none kept)."""
    logical = json.loads(column.logical_type.to_json())
    if logical.get("Type") == "Timestamp":
        unit = logical["timeUnit"]
        return _timestamp_text(raw_low, unit), _timestamp_text(raw_high, unit)
    if isinstance(raw_low, bytes):
        low, high = raw_low.decode("utf-8"), raw_high.decode("utf-8")
        if max(len(low), len(high)) > STATS_STRING_PREFIX_CHARS:
            return None
        return low, high
    return raw_low, raw_high


def _file_bounds(metadata: pq.FileMetaData, names: list[str]) -> dict[str, tuple[Any, Any]]:
    """The min/max of the columns ``names`` over a written file's row groups.

    Parquet's writer already computed them per row group (exact, or none when a value is over
    its statistics size limit); a column any non-empty row group has none for gets none.
    Strings compare as Parquet, Delta and Spark compare them: by their UTF-8 bytes.
    """
    leaf = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    bounds: dict[str, tuple[Any, Any]] = {}
    for name in names:
        index = leaf[name]
        low = high = None
        for group in range(metadata.num_row_groups):
            chunk = metadata.row_group(group).column(index)
            stats = chunk.statistics
            if stats is not None and stats.has_min_max:
                low = stats.min_raw if low is None else min(low, stats.min_raw)
                high = stats.max_raw if high is None else max(high, stats.max_raw)
            elif stats is None or stats.null_count != chunk.num_values:
                low = None  # values without statistics: no bounds for the file
                break
        if low is not None:
            kept = _stat_bounds(low, high, metadata.schema.column(index))
            if kept is not None:
                bounds[name] = kept
    return bounds


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
        # Delta's bounds come from the footer's statistics; bodies and nested columns get none
        # (Delta keeps no min/max of them), so the writer does not compare every body.
        self._bounded = [field.name for field in schema if _has_min_max(field.type)]
        self.name = f"part-{uuid.uuid4()}-c000.snappy.parquet"
        self.path = self.table_dir / self.name
        self.rows = 0
        self._nulls = dict.fromkeys(schema.names, 0)
        self._metadata: list[pq.FileMetaData] = []  # the file's footer, once closed
        self._writer: pq.ParquetWriter | None = None

    def write(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        for field in self.schema:
            column = rows.column(field.name)
            if not field.nullable and column.null_count:
                raise TableError(f"{self.path}: column {field.name} is NOT NULL but has nulls")
            self._nulls[field.name] += column.null_count
        try:
            if self._writer is None:
                self._writer = pq.ParquetWriter(
                    str(self.path),
                    self.schema,
                    compression="snappy",
                    use_dictionary=self._dictionary,
                    write_statistics=self._bounded,
                    metadata_collector=self._metadata,
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
        for name, (low, high) in _file_bounds(self._metadata[0], self._bounded).items():
            stats["minValues"][name], stats["maxValues"][name] = low, high
        stats["nullCount"] = dict(self._nulls)
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
