"""Where a reput micro-batch lies in the log, and where a reput stream starts.

Owns which stores a job reads (``store_list``), reading a batch's ``[start, end)`` (per
store, for a stream over several stores) from the stream's own offset log (no Spark job),
and the start of a stream whose checkpoint is fresh over existing tables
(``fresh_start_offset``, PURE, and ``starting_offsets``), and warming the Python workers
while the stream starts (``warm_python_workers``). Re-exported by ``reput.py``. Does not own
the writes.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rmq_spark.spark.delta_append import committed_txn_version
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.tables import TABLE_NAMES, max_physical_offset, table_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "StoreDirs",
    "fresh_start_offset",
    "has_progress",
    "logged_batch_range",
    "logged_store_ranges",
    "parse_offset_log_entry",
    "parse_store_offsets",
    "starting_offsets",
    "store_list",
    "warm_python_workers",
]

log = logging.getLogger("rmq_spark.reput")

StoreDirs = str | Path | Sequence[str | Path]
"""One store, a comma-separated list of stores, or a sequence of them."""


def parse_offset_log_entry(text: str) -> int | None:
    """The ``physical_offset`` of a Spark offset-log file of a one-source query (PURE).

    The file is ``v1``, a metadata JSON line, then one JSON line per source; ``None`` when
    the text is not that shape or the source's offset is not ``{"physical_offset": N}``.
    """
    offset = _source_offset(text)
    if not isinstance(offset, dict) or not isinstance(offset.get("physical_offset"), int):
        return None
    return int(offset["physical_offset"])


def _source_offset(text: str) -> object:
    """The one source's offset JSON of an offset-log file (``v1``, metadata, offset); ``None``
    when the text is not that shape."""
    lines = text.splitlines()
    if len(lines) != 3 or not lines[0].startswith("v"):
        return None
    try:
        return json.loads(lines[2])
    except ValueError:
        return None


def parse_store_offsets(text: str) -> dict[str, int] | None:
    """Each store's ``physical_offset`` in a Spark offset-log file of a query over several
    stores (``{"stores": {path: {"physical_offset": N}}}``, ``multi_store.py``; PURE);
    ``None`` when the text is not that shape."""
    offset = _source_offset(text)
    stores = offset.get("stores") if isinstance(offset, dict) else None
    if not isinstance(stores, dict):
        return None
    result: dict[str, int] = {}
    for store, value in stores.items():
        position = value.get("physical_offset") if isinstance(value, dict) else None
        if not isinstance(position, int):
            return None
        result[store] = position
    return result


def _read_store_offsets(offset_log: Path, batch_id: int) -> dict[str, int] | None:
    try:
        return parse_store_offsets((offset_log / str(batch_id)).read_text())
    except OSError:
        return None


def logged_store_ranges(offset_log: Path, batch_id: int) -> dict[str, tuple[int, int]] | None:
    """``{store: (start, end)}`` of micro-batch ``batch_id`` of a stream over several stores,
    from its offset log (as ``logged_batch_range``: a store missing from the previous entry,
    or no previous entry, starts at 0). ``None`` when the entry is missing or unreadable."""
    ends = _read_store_offsets(offset_log, batch_id)
    if ends is None:
        return None
    starts = (_read_store_offsets(offset_log, batch_id - 1) if batch_id > 0 else None) or {}
    return {store: (starts.get(store, 0), end) for store, end in ends.items()}


def logged_batch_range(offset_log: Path, batch_id: int) -> tuple[int, int] | None:
    """``[start, end)`` of micro-batch ``batch_id`` from the stream's offset log.

    Spark writes ``offsets/<id>`` before it runs batch ``id`` and a replay reads the same
    file, so the range (hence the txn version) of a batch never changes. Batch 0 and a batch
    whose predecessor's entry was purged start at 0 (rows below the tables' floors are
    dropped anyway). ``None`` when the entry is missing or unreadable.
    """
    try:
        end = parse_offset_log_entry((offset_log / str(batch_id)).read_text())
    except OSError:
        return None
    if end is None:
        return None
    start: int | None = 0
    if batch_id > 0:
        try:
            start = parse_offset_log_entry((offset_log / str(batch_id - 1)).read_text())
        except OSError:
            start = 0
    return (start or 0, end)


def has_progress(checkpoint_dir: Path) -> bool:
    offsets = checkpoint_dir / "offsets"
    return offsets.is_dir() and any(entry.name.isdigit() for entry in offsets.iterdir())


def fresh_start_offset(progress: Mapping[str, tuple[int, int | None]]) -> int | None:
    """Where a stream with a fresh checkpoint starts over existing tables (PURE).

    ``progress`` maps each table to ``(txn_version, max_physical_offset)``: its last reput
    ``txnVersion`` (-1: none) and its largest ``physical_offset`` (``None``: no rows). Returns
    a record start at or below the position every table is complete up to, or ``None`` for
    the log's start: when a table has no reput commit (it may lack rows that the others have)
    or has one but no rows (its completeness says nothing about a record start). Rows below
    what each table holds are dropped by the floors, so starting early duplicates nothing.
    """
    if not progress:
        return None
    starts: list[int] = []
    for txn_version, top in progress.values():
        if txn_version < 0 or top is None:
            return None
        starts.append(top)  # a record start below the table's txn version (its end)
    return min(starts)


def starting_offsets(spark: SparkSession, config: ReputConfig) -> str:
    """Where a one-store query with a fresh checkpoint starts: after what the tables already
    hold. (A query over several stores starts at ``earliest``, ``reput.start_reput``.)
    """
    versions: dict[str, int] = {}
    for name in TABLE_NAMES:
        path = table_path(config.tables_dir, name)
        if not (path / "_delta_log").is_dir():
            return "earliest"
        versions[name] = committed_txn_version(spark, str(path), config.txn_app_id)
        if versions[name] < 0:
            return "earliest"  # fresh_start_offset's answer, without reading any table
    progress = {
        name: (version, max_physical_offset(spark, config.tables_dir, name))
        for name, version in versions.items()
    }
    start = fresh_start_offset(progress)
    return "earliest" if start is None else json.dumps({"physical_offset": start})


def store_list(store_dir: StoreDirs) -> tuple[str, ...]:
    """The absolute paths of the stores ``store_dir`` names: one path, a comma-separated
    list (as the source's ``load("s1,s2")``) or a sequence of paths.

    Raises
    ------
    SourceError
        An empty path, a store named twice, a URI that is not local.
    """
    from rmq_spark.spark.multi_store import split_paths

    if isinstance(store_dir, str | Path):
        named = split_paths(str(store_dir))
    else:
        named = split_paths(",".join(str(path) for path in store_dir))
    return tuple(str(Path(path).absolute()) for path in named)


def _import_writer_modules(_: object) -> None:
    import numpy as np
    import pyarrow as pa

    # The imports are the point: the file writer, and the decoder it loads on first use.
    import rmq_spark.spark.columnar  # noqa: F401
    import rmq_spark.spark.reput_files  # noqa: F401
    from rmq_spark.store.crc import native_slices

    native_slices()  # the records' CRC loop: its library loaded and checked once

    # pyarrow's first array made from numpy imports pandas where it is installed (as it is
    # with PySpark): half a second per worker that the first batch's decoding would pay.
    pa.array(np.zeros(1, dtype=np.int64))


def warm_python_workers(spark: SparkSession) -> threading.Thread:
    """Start every core's Python worker and import the file writer there, in the background.

    Spark reuses Python workers, so the first batch's tasks then skip a second or so of
    process start and imports (pyarrow, numpy, pandas), while the stream itself is starting:
    after it, writing a batch's files imports nothing (a test checks that). A failure
    here is only logged: the batch would start the workers anyway.
    """

    def run() -> None:
        cores = spark.sparkContext.defaultParallelism
        try:
            spark.sparkContext.parallelize(range(cores), cores).foreach(_import_writer_modules)
        except Exception as err:  # Py4J errors: the real batch reports real problems
            log.debug("reput: warming the Python workers failed: %s", err)

    thread = threading.Thread(target=run, name="reput-warm-up", daemon=True)
    thread.start()
    return thread
