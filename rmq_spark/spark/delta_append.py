"""One idempotent Delta append, through Delta's transaction API, without a state rebuild.

``df.write.option("txnAppId", ...).option("txnVersion", ...)`` asks the table's snapshot for
the app's last version, and Delta 4.4 answers that by reconstructing the whole table state
(three Spark jobs and a large plan to optimize: about two thirds of a small append's time,
bench/bench_reput.py). The version checksum Delta writes after every commit
(``<version>.crc``) already lists the SetTransactions, so this module reads the version from
there, falls back to the state reconstruction when the checksum is missing, and commits data
files already written (``delta_files.py``) together with the ``SetTransaction`` in one Delta
transaction, as the writer option does: the app id is registered as read, so a concurrent
commit of the same app fails ours with Delta's ``ConcurrentTransactionException``. Owns
nothing else: tables are ``tables.py``, files ``delta_files.py``.

Why not a public API: the writer option above costs the state rebuild; delta-rs (a
dependency, whose ``create_write_transaction`` commits files with an app transaction) refuses
the tables' writer features (``Unsupported table features required: [ClusteredTable,
DomainMetadata]``: they are liquid-clustered by topic and store time, which the look-ups need).
What a Delta upgrade could change here without a compile error, that a concurrent commit of
the same app fails ours, is held by ``tests/reput/test_reput_files.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from py4j.java_gateway import JavaClass

from rmq_spark.errors import SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ALL_FILES_IN_CRC",
    "commit_files_once",
    "committed_file_count",
    "committed_txn_version",
    "keep_file_lists_out_of_checksums",
]

ALL_FILES_IN_CRC = "spark.databricks.delta.allFilesInCrc.enabled"
"""Delta (4.x) writes a table's whole file list into each version checksum while the table has
under 50 files. A commit then rewrites that list (every file's statistics) into its checksum,
and the first commit after the list was dropped (a table past 50 files that OPTIMIZE brings
back under) rebuilds it from the table state: Spark jobs, run while the commit holds the
table's lock, which every other commit to that table waits for (the reput's put -> visible
p99: 2.4-5.2 s stalls next to OPTIMIZE, bench/peers/visible.py). Nothing here reads that
list; the counts, SetTransactions and domain metadata stay in the checksum."""


def keep_file_lists_out_of_checksums(spark: SparkSession) -> None:
    """Commits of this session write no file list into Delta's version checksums
    (``ALL_FILES_IN_CRC``)."""
    spark.conf.set(ALL_FILES_IN_CRC, "false")


class _DeltaClasses:
    """The JVM classes and constants a commit uses, resolved once per JVM.

    Each dot of a ``jvm.org.apache....`` path is a py4j round trip, and each package along
    the way a class lookup that fails only after searching every jar on the class path: a
    commit spelled that way made about forty such lookups, a fifth of the reput driver JVM's
    CPU at 2,000 msgs/s (a flight recording). A ``JavaClass`` built from its full name asks
    nothing; its members are looked up here once.
    """

    def __init__(self, jvm: Any) -> None:
        client = jvm._gateway_client

        def java_class(name: str) -> Any:
            return JavaClass(name, client)

        delta = "org.apache.spark.sql.delta"
        self.jvm = jvm
        self.for_table = java_class(f"{delta}.DeltaLog").forTable
        self.action_from_json = java_class(f"{delta}.actions.Action").fromJson
        self.set_transaction = java_class(f"{delta}.actions.SetTransaction")
        self.write_operation = java_class(f"{delta}.DeltaOperations$Write")
        self.append = java_class("org.apache.spark.sql.SaveMode").Append
        self.none = java_class("scala.Option").empty()
        self.some = java_class("scala.Some")
        self.array_list = java_class("java.util.ArrayList")
        self.as_scala = java_class("scala.jdk.javaapi.CollectionConverters").asScala


_resolved: list[_DeltaClasses] = []  # the one JVM's (a PySpark process has one gateway)


def _classes(spark: SparkSession) -> _DeltaClasses:
    jvm = spark._jvm  # type: ignore[attr-defined]
    if not _resolved or _resolved[0].jvm is not jvm:
        _resolved[:] = [_DeltaClasses(jvm)]
    return _resolved[0]


def _delta_log(spark: SparkSession, path: str) -> Any:
    return _classes(spark).for_table(spark._jsparkSession, path)  # type: ignore[attr-defined]


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


def committed_file_count(spark: SparkSession, path: str) -> int | None:
    """How many data files the Delta table at ``path`` holds, from its version checksum
    (``None``: no checksum; ask the table)."""
    checksum = _delta_log(spark, path).startTransaction().snapshot().checksumOpt()
    return int(checksum.get().numFiles()) if checksum.isDefined() else None


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


def _scala_seq(classes: _DeltaClasses, items: list[Any]) -> Any:
    java_list = classes.array_list()
    for item in items:
        java_list.add(item)
    return classes.as_scala(java_list).toSeq()


def commit_files_once(
    spark: SparkSession,
    path: str,
    adds: Sequence[Mapping[str, Any]],
    *,
    schema_json: str,
    app_id: str,
    version: int,
    metadata: Mapping[str, object],
) -> int | None:
    """Commit data files already written into the Delta table at ``path`` (their ``add``
    actions, ``delta_files.DataFileWriter``) unless ``app_id`` has ``version`` there.

    Returns the number of rows committed (from the files' statistics), or ``None`` when the
    table already holds ``version`` (or a later one) of ``app_id``; the files are then left
    uncommitted, as Delta leaves a failed writer's files, for VACUUM. The commit carries
    ``SetTransaction(app_id, version)`` and ``metadata`` as its userMetadata; with no file it
    still records the version (the batch held no row for this table).

    Raises
    ------
    SchemaMismatchError
        The table's columns are not ``schema_json``'s (a Spark ``StructType`` as JSON), those
        the files were written with.
    py4j.protocol.Py4JJavaError
        Delta refused the commit (e.g. a concurrent commit of ``app_id``).
    """
    classes = _classes(spark)
    txn = _delta_log(spark, path).startTransaction()
    if _txn_version(txn, app_id) >= version:
        return None
    txn.readTxn().addOne(app_id)  # what txnVersion() does: concurrent commits of app_id conflict
    table_schema = txn.metadata().schemaString()
    if _strip_nullability(json.loads(table_schema)) != _strip_nullability(json.loads(schema_json)):
        raise SchemaMismatchError(
            f"the files written for {path} do not match its schema {table_schema}"
        )
    actions = [classes.action_from_json(json.dumps({"add": dict(add)})) for add in adds]
    none = classes.none
    actions.append(classes.set_transaction(app_id, version, none))
    operation = classes.write_operation(
        classes.append,
        none,
        none,
        classes.some(json.dumps(dict(metadata), sort_keys=True)),
        none,
        none,
        none,
        none,
        none,
    )
    txn.commit(_scala_seq(classes, actions), operation)
    return sum(int(json.loads(add["stats"])["numRecords"]) for add in adds)
