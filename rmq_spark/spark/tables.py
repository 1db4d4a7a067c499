"""The Delta tables the reput job builds: schemas, layout, catalog registration and writes.

Owns the three tables under one ``tables_dir`` (docs/TABLES.md describes them):

* ``consume_queue``  one row per message RocketMQ puts in a ConsumeQueue (FORMAT.md 6),
* ``message_index``  one row per UNIQ_KEY and per KEYS token (the IndexFile, RocketMQ IndexService),
* ``messages``       every message, the ``rocketmq`` source's full schema,

their creation, registration in the catalog, the reput's commit floors and compaction
(OPTIMIZE). Tables built from several stores have one more column, ``store`` (last, the
store's absolute path, as the source's ``store`` column), and cluster ``consume_queue`` by
``store`` first; tables of one store keep the one-store schema. A tables directory is one
or the other for life (``check_store_layout``). What differs between the two is owned by
the store layouts (``OneStore``, ``StoreOfSeveral``: one store's rows in either), decided
once where a job starts or read from the tables (``tables_layout``), so no flag is passed
around. Does not own the rows (``reput_rows.py``),
the data files and commits (``reput_files.py``, ``delta_files.py``, ``delta_append.py``),
the stream (``reput.py``) nor queries (``query.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from rmq_spark.errors import StoreLayoutMismatchError, TableError
from rmq_spark.spark.delta_append import committed_file_count, committed_txn_version
from rmq_spark.spark.delta_log_retention import remove_expired_log_files
from rmq_spark.spark.schema import SCHEMA_DDL

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "CLUSTER_COLUMNS",
    "CONSUME_QUEUE",
    "CONSUME_QUEUE_DDL",
    "MESSAGES",
    "MESSAGES_DDL",
    "MESSAGE_INDEX",
    "MESSAGE_INDEX_DDL",
    "ONE_STORE",
    "OneStore",
    "STORE_COLUMN",
    "StoreLayout",
    "StoreOfSeveral",
    "TABLE_DDL",
    "TABLE_NAMES",
    "check_store_layout",
    "checkpoint_tables",
    "committed_floors",
    "ensure_tables",
    "max_physical_offset",
    "optimize_tables",
    "register_tables",
    "table_path",
    "tables_layout",
]

CONSUME_QUEUE = "consume_queue"
MESSAGE_INDEX = "message_index"
MESSAGES = "messages"
TABLE_NAMES: tuple[str, ...] = (MESSAGES, MESSAGE_INDEX, CONSUME_QUEUE)
"""The three tables (the reput job appends to them in parallel)."""

CONSUME_QUEUE_DDL = (
    "topic string not null, queue_id int not null, queue_offset bigint not null, "
    "physical_offset bigint not null, total_size int not null, tags_code bigint not null, "
    "store_timestamp timestamp not null"
)
MESSAGE_INDEX_DDL = (
    "topic string not null, key string not null, key_type string not null, "
    "key_hash int not null, physical_offset bigint not null, store_timestamp timestamp not null"
)
# CREATE TABLE takes no NOT NULL inside array/map types; the source's rows still fit.
MESSAGES_DDL = SCHEMA_DDL.replace("array<string not null>", "array<string>").replace(
    "map<string, string not null>", "map<string, string>"
)
TABLE_DDL: Mapping[str, str] = {
    CONSUME_QUEUE: CONSUME_QUEUE_DDL,
    MESSAGE_INDEX: MESSAGE_INDEX_DDL,
    MESSAGES: MESSAGES_DDL,
}
# Liquid clustering keys: OPTIMIZE lays rows out along them and Delta's per-file min/max
# statistics on them let a point lookup skip almost every file.
CLUSTER_COLUMNS: Mapping[str, tuple[str, ...]] = {
    CONSUME_QUEUE: ("topic", "queue_id", "queue_offset"),
    MESSAGE_INDEX: ("key_hash",),
    MESSAGES: ("topic", "store_timestamp"),
}
# A checkpoint is a Spark job over the table's state, and Delta writes it inside the commit
# that reaches the interval: a micro-batch per second would wait seconds for it. The reput's
# maintenance thread checkpoints the tables itself, beside the stream (``checkpoint_tables``,
# ``reput_maintenance.py``), so the interval Delta would use is set out of reach.
_TABLE_PROPERTIES = "'delta.checkpointInterval' = '1000000'"
STORE_COLUMN = "store"  # the source's name for it (``multi_store.STORE_COLUMN``)


@dataclass(frozen=True, slots=True)
class OneStore:
    """Tables of one store: no ``store`` column, every row is the store's."""

    has_store_column: ClassVar[bool] = False
    store: ClassVar[str | None] = None
    label: ClassVar[str] = ""  # what a log line adds to name the store

    def app_id(self, base: str) -> str:
        return base

    def ddl(self, name: str) -> str:
        return TABLE_DDL[name]

    def cluster_columns(self, name: str) -> tuple[str, ...]:
        return CLUSTER_COLUMNS[name]

    def arrow_schema(self, schema: pa.Schema) -> pa.Schema:
        return schema

    def tag(self, rows: pa.Table) -> pa.Table:
        return rows

    def rows(self, table: DataFrame) -> DataFrame:
        return table

    def commit_metadata(self) -> dict[str, object]:
        return {}

    def owns(self, metadata: Mapping[str, object]) -> bool:
        """Whether a reput commit's metadata is of this store's rows."""
        return metadata.get(STORE_COLUMN) is None


@dataclass(frozen=True, slots=True)
class StoreOfSeveral:
    """One store's rows in tables of several: the ``store`` column (last, the store's absolute
    path) tells them apart, ``consume_queue`` is keyed and clustered by it first, and the
    store's reput commits carry its own txn app id and name it in their metadata."""

    store: str
    has_store_column: ClassVar[bool] = True

    @property
    def label(self) -> str:
        return f" ({self.store})"

    def app_id(self, base: str) -> str:
        return f"{base}:{self.store}"

    def ddl(self, name: str) -> str:
        return f"{TABLE_DDL[name]}, {STORE_COLUMN} string not null"

    def cluster_columns(self, name: str) -> tuple[str, ...]:
        if name == CONSUME_QUEUE:  # the key is (store, topic, queue_id, queue_offset)
            return (STORE_COLUMN, *CLUSTER_COLUMNS[name])
        return CLUSTER_COLUMNS[name]

    def arrow_schema(self, schema: pa.Schema) -> pa.Schema:
        return schema.append(pa.field(STORE_COLUMN, pa.string(), False))

    def tag(self, rows: pa.Table) -> pa.Table:
        values = pa.repeat(pa.scalar(self.store, pa.string()), rows.num_rows)
        return rows.append_column(pa.field(STORE_COLUMN, pa.string(), False), values)

    def rows(self, table: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        return table.where(F.col(STORE_COLUMN) == F.lit(self.store))

    def commit_metadata(self) -> dict[str, object]:
        return {STORE_COLUMN: self.store}  # tables_lag finds each store's last commit

    def owns(self, metadata: Mapping[str, object]) -> bool:
        return metadata.get(STORE_COLUMN) == self.store


StoreLayout = OneStore | StoreOfSeveral
"""One store's rows in the tables, and what the tables' layout makes of them."""

ONE_STORE = OneStore()


def table_path(tables_dir: str | Path, name: str) -> Path:
    """``<tables_dir>/<name>``: where table ``name`` keeps its Delta log and files."""
    if name not in TABLE_DDL:
        raise ValueError(f"unknown table {name!r}; tables: {sorted(TABLE_DDL)}")
    return Path(tables_dir).absolute() / name


# --- tables -------------------------------------------------------------------------------


def _sql_path(path: Path) -> str:
    return "delta.`" + str(path).replace("`", "``") + "`"


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _is_delta_table(path: Path) -> bool:
    return (path / "_delta_log").is_dir() and any((path / "_delta_log").glob("*.json"))


def ensure_tables(
    spark: SparkSession, tables_dir: str | Path, layout: StoreLayout = ONE_STORE
) -> None:
    """Create the three Delta tables under ``tables_dir`` where they do not exist yet, in
    ``layout`` (with the ``store`` column for tables of several stores).

    Raises
    ------
    TableError
        Delta refused to create a table (the message names it).
    """

    def create(name: str) -> None:
        path = table_path(tables_dir, name)
        if _is_delta_table(path):
            return
        cluster = ", ".join(layout.cluster_columns(name))
        try:
            spark.sql(
                f"CREATE TABLE IF NOT EXISTS {_sql_path(path)} ({layout.ddl(name)}) "
                "USING delta "
                f"CLUSTER BY ({cluster}) TBLPROPERTIES ({_TABLE_PROPERTIES})"
            )
        except Exception as err:  # Py4J/Delta errors: re-raised as ours
            if _is_delta_table(path):  # created concurrently by another session
                return
            raise TableError(f"{name}: cannot create the Delta table at {path}: {err}") from err

    _for_each_table(create)


def check_store_layout(spark: SparkSession, tables_dir: str | Path, layout: StoreLayout) -> None:
    """Refuse to add rows of several stores to one-store tables, or the other way round:
    a one-store table has no ``store`` column to tell the stores' rows (and queue offsets)
    apart, and a table of several stores needs it in every row.

    Raises
    ------
    StoreLayoutMismatchError
        An existing table under ``tables_dir`` was built the other way.
    """
    for name in TABLE_NAMES:
        path = table_path(tables_dir, name)
        if not _is_delta_table(path):
            continue
        has_store = STORE_COLUMN in spark.read.format("delta").load(str(path)).columns
        if has_store != layout.has_store_column:
            raise StoreLayoutMismatchError(
                f"{path}: built from {_describe(has_store)}, now asked to index "
                f"{_describe(layout.has_store_column)}; use another tables directory "
                "(docs/TABLES.md)"
            )


def _describe(has_store_column: bool) -> str:
    return "several stores" if has_store_column else "one store"


def tables_layout(spark: SparkSession, tables_dir: str | Path, store: str | Path) -> StoreLayout:
    """``store``'s layout in the existing tables under ``tables_dir``: ``StoreOfSeveral`` when
    they have the ``store`` column, else (or with no tables yet) ``ONE_STORE``."""
    path = table_path(tables_dir, MESSAGES)
    if _is_delta_table(path) and STORE_COLUMN in spark.read.format("delta").load(str(path)).columns:
        return StoreOfSeveral(str(Path(store).absolute()))
    return ONE_STORE


def _for_each_table(action: Callable[[str], None]) -> None:
    """``action`` on every table at once: each is a few driver-side round trips to Delta or
    the catalog, about half a second, so in parallel a job starts that much sooner."""
    with ThreadPoolExecutor(max_workers=len(TABLE_NAMES), thread_name_prefix="tables") as pool:
        for future in [pool.submit(action, name) for name in TABLE_NAMES]:
            future.result()


def register_tables(
    spark: SparkSession,
    tables_dir: str | Path,
    database: str = "rmq",
    layout: StoreLayout = ONE_STORE,
) -> None:
    """Make ``<database>.consume_queue``, ``.message_index`` and ``.messages`` queryable by SQL.

    Creates the tables under ``tables_dir`` if needed, the database, and external catalog
    entries pointing at them. Safe to call in every new session (the in-memory catalog
    forgets) and again with another ``tables_dir`` (the entries are re-pointed).

    Raises
    ------
    TableError
        A table cannot be created or registered.
    """
    ensure_tables(spark, tables_dir, layout)  # missing tables: in the layout of the caller

    def register(name: str) -> None:
        path = table_path(tables_dir, name)
        qualified = f"{database}.{name}"
        location = _registered_location(spark, qualified)
        if location is not None:
            if _same_location(location, path):
                return
            _drop_entry(spark, qualified)
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {qualified} USING delta LOCATION {_sql_string(str(path))}"
        )

    try:
        # Hive's metastore logs an ERROR with a stack trace for IF NOT EXISTS on a database
        # that exists (Spark's own existence check does not catch it): ask first.
        if not spark.catalog.databaseExists(database):
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
        _for_each_table(register)
    except TableError:
        raise
    except Exception as err:
        raise TableError(
            f"cannot register the tables of {tables_dir} in {database}: {err}"
        ) from err


def _session_catalog(spark: SparkSession, qualified: str) -> tuple[Any, Any]:
    state = spark._jsparkSession.sessionState()  # type: ignore[attr-defined]
    return state.catalog(), state.sqlParser().parseTableIdentifier(qualified)


def _registered_location(spark: SparkSession, qualified: str) -> str | None:
    """Where a catalog entry points (``None``: no entry), read from the session catalog.

    Not through Delta, which refuses an entry whose directory was deleted meanwhile.
    """
    catalog, identifier = _session_catalog(spark, qualified)
    if not catalog.tableExists(identifier):
        return None
    return str(catalog.getTableMetadata(identifier).location().toString())


def _drop_entry(spark: SparkSession, qualified: str) -> None:
    """Drop a catalog entry only (external: the files stay), even when its files are gone."""
    catalog, identifier = _session_catalog(spark, qualified)
    catalog.dropTable(identifier, True, False)


def _same_location(location: str, path: Path) -> bool:
    return location.removeprefix("file:").rstrip("/") == str(path).rstrip("/")


def max_physical_offset(
    spark: SparkSession, tables_dir: str | Path, name: str, layout: StoreLayout = ONE_STORE
) -> int | None:
    """The largest ``physical_offset`` of ``layout``'s rows in table ``name`` (``None``: no
    rows). An empty table is known from its version checksum without a Spark job."""
    from pyspark.sql import functions as F

    path = table_path(tables_dir, name)
    if committed_file_count(spark, str(path)) == 0:
        return None
    table = layout.rows(spark.read.format("delta").load(str(path)))
    top = table.agg(F.max("physical_offset")).first()[0]
    return None if top is None else int(top)


def committed_floors(
    spark: SparkSession,
    tables_dir: str | Path,
    app_id: str = "rmq-reput",
    layout: StoreLayout = ONE_STORE,
) -> dict[str, int]:
    """Per table, the physical offset from which its rows are still missing.

    The table's last ``txnVersion`` of ``app_id``: the log position its newest reput commit
    ends at, written atomically with that commit's rows, so the table holds every message
    below it. A table without a reput commit (empty, or filled by something else) gets
    ``max(physical_offset) + 1`` (0 when empty), of ``layout``'s rows (in tables of several
    stores ``app_id`` is then that store's, ``layout.app_id``).
    """
    floors: dict[str, int] = {}
    for name in TABLE_NAMES:
        path = table_path(tables_dir, name)
        if not _is_delta_table(path):
            floors[name] = 0
            continue
        version = committed_txn_version(spark, str(path), app_id)
        if version >= 0:
            floors[name] = version
            continue
        top = max_physical_offset(spark, tables_dir, name, layout)
        floors[name] = 0 if top is None else top + 1
    return floors


def checkpoint_tables(tables_dir: str | Path, log_retention_s: float | None = None) -> None:
    """Write a Delta checkpoint of each table (readers then replay few commit files), then
    remove the log files older than ``log_retention_s`` that it makes unneeded
    (``delta_log_retention.py``; ``None``: keep every version).

    delta-rs writes it (a classic checkpoint: every action of the table's state, the app
    transaction versions and the clustering domain included), in tens of milliseconds and
    without Spark. Delta's own ``DeltaLog.checkpoint`` rebuilt the table state in a Spark job
    of 1-7 s of both cores per table, which set the reput's tail latency beside a full
    stream (BENCHMARKS.md, "Put -> SQL latency").

    Raises
    ------
    TableError
        A checkpoint could not be written (the message names the table).
    """
    from deltalake import DeltaTable

    for name in TABLE_NAMES:
        path = table_path(tables_dir, name)
        if not _is_delta_table(path):
            continue
        try:
            # Hadoop's local file system keeps a checksum beside each file it writes and checks
            # it on read: a stale one beside the _last_checkpoint delta-rs replaces would fail
            # every Spark read of it (Delta falls back to listing, with a stack trace logged).
            (path / "_delta_log" / "._last_checkpoint.crc").unlink(missing_ok=True)
            DeltaTable(str(path)).create_checkpoint()
        except Exception as err:  # OSError, and deltalake's errors, which share no other base
            raise TableError(f"{name}: checkpoint of {path} failed: {err}") from err
        if log_retention_s is None:
            continue
        try:
            remove_expired_log_files(path / "_delta_log", log_retention_s, time.time())
        except OSError as err:
            raise TableError(f"{name}: removing expired log files of {path}: {err}") from err


_OWN_DELTA_LOG = {"fs.rmq-spark.delta-log": "maintenance"}  # an inert Hadoop setting


def optimize_tables(spark: SparkSession, tables_dir: str | Path) -> dict[str, int]:
    """Compact and cluster each table (Delta OPTIMIZE); returns files removed per table.

    OPTIMIZE only rewrites files and changes no data, so Delta lets it commit next to blind
    appends from a running reput (docs/TABLES.md, tests/reput/test_reput_writer.py).
    """
    from delta.tables import DeltaTable

    removed: dict[str, int] = {}
    for name in TABLE_NAMES:
        path = table_path(tables_dir, name)
        if not _is_delta_table(path):
            continue
        try:
            # A DeltaLog of its own (Delta keys its cache by path and fs.* options): on the
            # shared one, a reput commit installing its new snapshot waited up to 0.9 s on
            # the old snapshot's state cache, which OPTIMIZE holds while filling it.
            own = DeltaTable.forPath(spark, str(path), _OWN_DELTA_LOG)
            metrics = own.optimize().executeCompaction().first()["metrics"]
        except Exception as err:
            raise TableError(f"{name}: OPTIMIZE of {path} failed: {err}") from err
        removed[name] = int(metrics["numFilesRemoved"])
    return removed
