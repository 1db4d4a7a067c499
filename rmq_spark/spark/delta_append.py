"""One idempotent Delta append, through Delta's transaction API, without a state rebuild.

``df.write.option("txnAppId", ...).option("txnVersion", ...)`` asks the table's snapshot for
the app's last version, and Delta 4.4 answers that by reconstructing the whole table state
(three Spark jobs and a large plan to optimize: about two thirds of a small append's time,
bench/bench_reput.py). The version checksum Delta writes after every commit
(``<version>.crc``) already lists the SetTransactions, so this module reads the version from
there, falls back to the state reconstruction when the checksum is missing, and commits the
written files together with the ``SetTransaction`` in one Delta transaction, as the writer
option does: the app id is registered as read, so a concurrent commit of the same app fails
ours with Delta's ``ConcurrentTransactionException``. Owns nothing else: tables and rows are
``tables.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rmq_spark.errors import SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["committed_txn_version", "delta_append_once"]


def _delta_log(spark: SparkSession, path: str) -> Any:
    jvm = spark._jvm  # type: ignore[attr-defined]
    return jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)  # type: ignore[attr-defined]


def _txn_version(txn: Any, app_id: str) -> int:
    """The app's committed version in the transaction's snapshot (-1: none)."""
    checksum = txn.snapshot().checksumOpt()
    if checksum.isDefined() and checksum.get().setTransactions().isDefined():
        version = -1
        entries = checksum.get().setTransactions().get().iterator()
        while entries.hasNext():
            entry = entries.next()
            if entry.appId() == app_id:
                version = max(version, int(entry.version()))
        return version
    return int(txn.txnVersion(app_id))  # no checksum: Delta rebuilds the state


def committed_txn_version(spark: SparkSession, path: str, app_id: str) -> int:
    """The last ``txnVersion`` committed by ``app_id`` to the Delta table at ``path`` (-1: none)."""
    return _txn_version(_delta_log(spark, path).startTransaction(), app_id)


def _strip_nullability(node: object) -> object:
    if isinstance(node, dict):
        return {
            key: _strip_nullability(value)
            for key, value in node.items()
            if key not in ("nullable", "containsNull", "valueContainsNull", "metadata")
        }
    if isinstance(node, list):
        return [_strip_nullability(item) for item in node]
    return node


def delta_append_once(
    rows: DataFrame, path: str, *, app_id: str, version: int, metadata: Mapping[str, object]
) -> int | None:
    """Append ``rows`` to the Delta table at ``path`` unless ``app_id`` has ``version`` there.

    Returns the number of rows committed (from the written files' statistics), or ``None``
    when the table already holds ``version`` (or a later one) of ``app_id``. The commit
    carries ``SetTransaction(app_id, version)`` and ``metadata`` as its userMetadata; file
    statistics and the table's constraints (NOT NULL) are applied by Delta's writer as in
    any append.

    Raises
    ------
    SchemaMismatchError
        The rows do not have the table's columns and types.
    py4j.protocol.Py4JJavaError
        Delta refused the write or the commit (e.g. a concurrent commit of ``app_id``).
    """
    spark = rows.sparkSession
    jvm = spark._jvm  # type: ignore[attr-defined]
    txn = _delta_log(spark, path).startTransaction()
    if _txn_version(txn, app_id) >= version:
        return None
    txn.readTxn().addOne(app_id)  # what txnVersion() does: concurrent commits of app_id conflict
    table_schema = _strip_nullability(json.loads(txn.metadata().schemaString()))
    if _strip_nullability(json.loads(rows.schema.json())) != table_schema:
        raise SchemaMismatchError(
            f"rows {rows.schema.simpleString()} do not match the table at {path}: "
            f"{txn.metadata().schemaString()}"
        )
    files = txn.writeFiles(rows._jdf)
    none = jvm.scala.Option.empty()
    set_txn = jvm.org.apache.spark.sql.delta.actions.SetTransaction(app_id, version, none)
    operation = jvm.org.apache.spark.sql.delta.DeltaOperations.Write(
        jvm.org.apache.spark.sql.SaveMode.Append,
        none,
        none,
        jvm.scala.Some(json.dumps(dict(metadata), sort_keys=True)),
        none,
        none,
        none,
        none,
        none,
    )
    txn.commit(files.appended(set_txn), operation)
    written = 0
    added = files.iterator()
    while added.hasNext():
        stats = added.next().stats()
        written += int(json.loads(stats)["numRecords"]) if stats else 0
    return written
