"""The Delta tables the reput job builds: schemas, layout, catalog registration and writes.

Owns the three tables under one ``tables_dir`` (docs/TABLES.md describes them):

* ``consume_queue``  one row per message RocketMQ puts in a ConsumeQueue (FORMAT.md 6),
* ``message_index``  one row per UNIQ_KEY and per KEYS token (the IndexFile, RocketMQ IndexService),
* ``messages``       every message, the ``rocketmq`` source's full schema,

how a batch of source rows becomes rows of each (plain Spark SQL expressions: Java's
``String.hashCode`` runs in the JVM through ``reflect('java.util.Objects', 'hashCode', s)``,
which is exactly Java's, so no Python UDF touches a row), the idempotent append
(a Delta ``SetTransaction`` per commit), registration in the catalog and compaction (OPTIMIZE).
Does not own the stream (``reput.py``) nor queries (``query.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmq_spark.errors import TableError
from rmq_spark.spark.delta_append import committed_txn_version, delta_append_once
from rmq_spark.spark.schema import COLUMN_NAMES, SCHEMA_DDL
from rmq_spark.store.layout import (
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "CLUSTER_COLUMNS",
    "CONSUME_QUEUE",
    "CONSUME_QUEUE_DDL",
    "MESSAGES",
    "MESSAGES_DDL",
    "MESSAGE_INDEX",
    "MESSAGE_INDEX_DDL",
    "TABLE_DDL",
    "TABLE_NAMES",
    "append_idempotent",
    "committed_floors",
    "consume_queue_rows",
    "ensure_tables",
    "java_string_hash_column",
    "message_index_rows",
    "messages_rows",
    "optimize_tables",
    "register_tables",
    "table_path",
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
_COLUMNS: Mapping[str, tuple[str, ...]] = {
    CONSUME_QUEUE: tuple(part.split()[0] for part in CONSUME_QUEUE_DDL.split(", ")),
    MESSAGE_INDEX: tuple(part.split()[0] for part in MESSAGE_INDEX_DDL.split(", ")),
    MESSAGES: COLUMN_NAMES,
}
_INT_MIN = -(1 << 31)
# A micro-batch per second commits to each table every second; Delta's default of a checkpoint
# every 10 commits would stall one batch in ten by seconds. Readers replay <= 100 small JSONs.
_TABLE_PROPERTIES = "'delta.checkpointInterval' = '100'"


def table_path(tables_dir: str | Path, name: str) -> Path:
    """``<tables_dir>/<name>``: where table ``name`` keeps its Delta log and files."""
    if name not in TABLE_DDL:
        raise ValueError(f"unknown table {name!r}; tables: {sorted(TABLE_DDL)}")
    return Path(tables_dir).absolute() / name


# --- rows ---------------------------------------------------------------------------------


def java_string_hash_column(text: Column) -> Column:
    """Java ``String.hashCode`` of a string column as an int (0 for null), computed in the JVM.

    ``java.util.Objects.hashCode(s)`` is ``s.hashCode()`` (UTF-16 code units, int32 wrap) and
    0 for null. This is *not* Spark's ``hash()`` (Murmur3).
    """
    from pyspark.sql import functions as F

    return F.call_function("reflect", F.lit("java.util.Objects"), F.lit("hashCode"), text).cast(
        "int"
    )


def _property(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.try_element_at(F.col("properties"), F.lit(name))


def _transaction_bits() -> Column:
    from pyspark.sql import functions as F

    return F.col("sys_flag").bitwiseAND(F.lit(TRANSACTION_MASK))


def consume_queue_rows(messages: DataFrame, delay_levels_ms: tuple[int, ...]) -> DataFrame:
    """ConsumeQueue rows of source rows: messages of transaction type NOT or COMMIT only.

    ``tags_code`` follows FORMAT.md 6: the Java hash of TAGS (0 when absent); for
    ``SCHEDULE_TOPIC_XXXX`` with DELAY > 0 the delivery time ``store_timestamp + delay of
    min(DELAY, levels)`` in ms; for ``rmq_sys_wheel_timer`` the delivery time TIMER_OUT_MS
    (else TIMER_DELIVER_MS) so the delay job finds due timer messages the same way.

    Parameters
    ----------
    messages
        Rows with the ``rocketmq`` source's schema.
    delay_levels_ms
        ``parse_message_delay_level(store.message_delay_level)``: ms per level, level = i + 1.
    """
    from pyspark.sql import functions as F

    tx = _transaction_bits()
    dispatched = messages.where(tx.isin(TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE))
    tags_hash = java_string_hash_column(F.col("tags")).cast("bigint")
    topic = F.col("topic")
    candidates = []
    if delay_levels_ms:
        delay = _property("DELAY").try_cast("int")
        level = F.least(delay, F.lit(len(delay_levels_ms)))
        level_ms = F.try_element_at(
            F.array(*[F.lit(ms).cast("bigint") for ms in delay_levels_ms]), level
        )
        candidates.append(
            F.when(
                (topic == F.lit(RMQ_SYS_SCHEDULE_TOPIC)) & (level > 0),
                F.unix_millis(F.col("store_timestamp")) + level_ms,
            )
        )
    candidates.append(
        F.when(
            topic == F.lit(RMQ_SYS_WHEEL_TIMER_TOPIC),
            F.coalesce(
                _property("TIMER_OUT_MS").try_cast("bigint"),
                _property("TIMER_DELIVER_MS").try_cast("bigint"),
            ),
        )
    )
    tags_code = F.coalesce(*candidates, tags_hash)
    return dispatched.select(
        "topic",
        "queue_id",
        "queue_offset",
        "physical_offset",
        "total_size",
        tags_code.alias("tags_code"),
        "store_timestamp",
    )


def message_index_rows(messages: DataFrame) -> DataFrame:
    """IndexFile rows of source rows: one per UNIQ_KEY and per non-empty KEYS token
    (RocketMQ IndexService).

    ROLLBACK messages are skipped. ``key_hash`` is the IndexFile hash of ``topic#key``:
    ``abs(hashCode)``, 0 when hashCode is Integer.MIN_VALUE (RocketMQ IndexService).
    """
    from pyspark.sql import functions as F

    eligible = messages.where(_transaction_bits() != F.lit(TRANSACTION_ROLLBACK_TYPE))
    uniq = eligible.select(
        "topic",
        _property("UNIQ_KEY").alias("key"),
        F.lit("UNIQ_KEY").alias("key_type"),
        "physical_offset",
        "store_timestamp",
    ).where(F.col("key").isNotNull())
    tokens = F.filter(F.split(_property("KEYS"), " "), lambda token: token != F.lit(""))
    keys = eligible.select(
        "topic",
        F.explode(tokens).alias("key"),
        F.lit("KEYS").alias("key_type"),
        "physical_offset",
        "store_timestamp",
    )
    rows = uniq.unionByName(keys)
    code = java_string_hash_column(F.concat(F.col("topic"), F.lit("#"), F.col("key")))
    key_hash = F.when(code == F.lit(_INT_MIN), F.lit(0)).otherwise(F.abs(code))
    return rows.select(
        "topic", "key", "key_type", key_hash.alias("key_hash"), "physical_offset", "store_timestamp"
    )


def messages_rows(messages: DataFrame) -> DataFrame:
    """The ``messages`` table rows: the source's columns, in its order."""
    return messages.select(*COLUMN_NAMES)


# --- tables -------------------------------------------------------------------------------


def _sql_path(path: Path) -> str:
    return "delta.`" + str(path).replace("`", "``") + "`"


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _is_delta_table(path: Path) -> bool:
    return (path / "_delta_log").is_dir() and any((path / "_delta_log").glob("*.json"))


def ensure_tables(spark: SparkSession, tables_dir: str | Path) -> None:
    """Create the three Delta tables under ``tables_dir`` where they do not exist yet.

    Raises
    ------
    TableError
        Delta refused to create a table (the message names it).
    """
    for name in TABLE_NAMES:
        path = table_path(tables_dir, name)
        if _is_delta_table(path):
            continue
        cluster = ", ".join(CLUSTER_COLUMNS[name])
        try:
            spark.sql(
                f"CREATE TABLE IF NOT EXISTS {_sql_path(path)} ({TABLE_DDL[name]}) USING delta "
                f"CLUSTER BY ({cluster}) TBLPROPERTIES ({_TABLE_PROPERTIES})"
            )
        except Exception as err:  # Py4J/Delta errors: re-raised as ours
            if _is_delta_table(path):  # created concurrently by another session
                continue
            raise TableError(f"{name}: cannot create the Delta table at {path}: {err}") from err


def register_tables(spark: SparkSession, tables_dir: str | Path, database: str = "rmq") -> None:
    """Make ``<database>.consume_queue``, ``.message_index`` and ``.messages`` queryable by SQL.

    Creates the tables under ``tables_dir`` if needed, the database, and external catalog
    entries pointing at them. Safe to call in every new session (the in-memory catalog
    forgets) and again with another ``tables_dir`` (the entries are re-pointed).

    Raises
    ------
    TableError
        A table cannot be created or registered.
    """
    ensure_tables(spark, tables_dir)
    try:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
        for name in TABLE_NAMES:
            path = table_path(tables_dir, name)
            qualified = f"{database}.{name}"
            location = _registered_location(spark, qualified)
            if location is not None:
                if _same_location(location, path):
                    continue
                _drop_entry(spark, qualified)
            spark.sql(
                f"CREATE TABLE IF NOT EXISTS {qualified} USING delta "
                f"LOCATION {_sql_string(str(path))}"
            )
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


def committed_floors(
    spark: SparkSession, tables_dir: str | Path, app_id: str = "rmq-reput"
) -> dict[str, int]:
    """Per table, the physical offset from which its rows are still missing.

    The table's last ``txnVersion`` of ``app_id``: the log position its newest reput commit
    ends at, written atomically with that commit's rows, so the table holds every message
    below it. A table without a reput commit (empty, or filled by something else) gets
    ``max(physical_offset) + 1`` (0 when empty), answered from the commit statistics.
    """
    from pyspark.sql import functions as F

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
        top = spark.read.format("delta").load(str(path)).agg(F.max("physical_offset")).first()[0]
        floors[name] = 0 if top is None else int(top) + 1
    return floors


def append_idempotent(
    rows: DataFrame,
    tables_dir: str | Path,
    name: str,
    *,
    app_id: str,
    version: int,
    metadata: Mapping[str, object],
) -> int | None:
    """Append ``rows`` to table ``name`` once: skipped if ``(app_id, version)`` or a later
    version of ``app_id`` is already committed to that table (Delta ``SetTransaction``,
    ``delta_append.py``). Returns the rows committed, ``None`` when skipped.

    Raises
    ------
    TableError
        The write failed (the message names the table and the version).
    """
    path = table_path(tables_dir, name)
    try:
        return delta_append_once(
            rows.select(*_COLUMNS[name]),
            str(path),
            app_id=app_id,
            version=version,
            metadata=metadata,
        )
    except Exception as err:
        raise TableError(
            f"{name}: appending version {version} of {app_id!r} to {path} failed: {err}"
        ) from err


def optimize_tables(spark: SparkSession, tables_dir: str | Path) -> dict[str, int]:
    """Compact and cluster each table (Delta OPTIMIZE); returns files removed per table.

    OPTIMIZE only rewrites files and changes no data, so Delta lets it commit next to blind
    appends from a running reput (docs/TABLES.md, tests/reput/test_maintenance.py).
    """
    removed: dict[str, int] = {}
    for name in TABLE_NAMES:
        path = table_path(tables_dir, name)
        if not _is_delta_table(path):
            continue
        try:
            metrics = spark.sql(f"OPTIMIZE {_sql_path(path)}").first()["metrics"]
        except Exception as err:
            raise TableError(f"{name}: OPTIMIZE of {path} failed: {err}") from err
        removed[name] = int(metrics["numFilesRemoved"])
    return removed
