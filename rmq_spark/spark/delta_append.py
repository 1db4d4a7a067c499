"""One idempotent Delta append, through Delta's transaction API, without a state rebuild.

``df.write.option("txnAppId", ...).option("txnVersion", ...)`` asks the table's snapshot for
the app's last version, and Delta 4.4 answers that by reconstructing the whole table state
(three Spark jobs and a large plan to optimize: about two thirds of a small append's time,
bench/bench_reput.py). The version checksum Delta writes after every commit
(``<version>.crc``) already lists the SetTransactions, so this module reads the version from
there, falls back to the state reconstruction when the checksum is missing, and commits data
files already written (``delta_files.py``) together with the ``SetTransaction`` in one Delta
transaction, as the writer option does. Each attempt reads the app's version on the latest
snapshot and Delta's version files are exclusive (one writer creates ``N.json``), so a concurrent
commit of the same app and version leaves ours out (the app id is also registered as read: were
Delta to retry internally, its conflict check would fail ours). Owns nothing else: tables are
``tables.py``, files ``delta_files.py``.

Why not a public API: the writer option above costs the state rebuild; delta-rs (a
dependency, whose ``create_write_transaction`` commits files with an app transaction) refuses
the tables' writer features (``Unsupported table features required: [ClusteredTable,
DomainMetadata]``: they are liquid-clustered by topic and store time, which the look-ups need).
What a Delta upgrade could change here without a compile error, that a concurrent commit of
the same app and version leaves ours out, is held by ``tests/reput/test_reput_files.py``.

**Beside another writer** (the reput's OPTIMIZE, on a ``DeltaLog`` of its own): its commit
lands as ``N.json`` and its checksum ``N.crc`` when its process gets the CPU to write it
(paused between batches and in the idle scheduling class, 0.6-0.7 s later at 2,000 msgs/s). A
commit of ours that reads version N in between, or that Delta retries at N+1 because N was
taken under it, finds no checksum to derive its own from, and Delta then rebuilds the table
state (Spark jobs, run beside OPTIMIZE's: 6-13 s at 2,000 msgs/s) to learn the SetTransactions
and write N+1's checksum. So before Delta loads versions other writers committed, a commit
here writes each missing checksum itself, as the other writer would (Delta's incremental
derivation from N-1's checksum and N's actions: milliseconds, no table state), and waits for
the writer's own only where Delta cannot derive it (up to ``CHECKSUM_WAIT_S``). It makes one
attempt (a session of its own with Delta's ``maxCommitAttempts`` at 0) and, when another writer
took the version, starts again on the new snapshot, up to ``COMMIT_ATTEMPTS`` times.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JJavaError

from rmq_spark.errors import SchemaMismatchError, TableError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ALL_FILES_IN_CRC",
    "CHECKSUM_WAIT_S",
    "COMMIT_ATTEMPTS",
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


COMMIT_ATTEMPTS = 20
"""Attempts of one commit, each on the snapshot another writer's commit left (module doc)."""

CHECKSUM_WAIT_S = 2.0
"""How long a commit waits for the checksum of a version whose previous one has its own."""

_CHECKSUM_POLL_S = 0.02
_MAX_COMMIT_ATTEMPTS = "spark.databricks.delta.maxCommitAttempts"
_VERSION_TAKEN = "DELTA_MAX_COMMIT_RETRIES_EXCEEDED"  # our one attempt found the version taken

log = logging.getLogger("rmq_spark.reput")


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
        self.delta_logs = java_class(f"{delta}.DeltaLog")
        self.for_table = self.delta_logs.forTable
        self.action_from_json = java_class(f"{delta}.actions.Action").fromJson
        self.set_transaction = java_class(f"{delta}.actions.SetTransaction")
        self.write_operation = java_class(f"{delta}.DeltaOperations$Write")
        self.append = java_class("org.apache.spark.sql.SaveMode").Append
        self.none = java_class("scala.Option").empty()
        self.some = java_class("scala.Some")
        self.right = java_class("scala.util.Right")
        self.array_list = java_class("java.util.ArrayList")
        self.as_scala = java_class("scala.jdk.javaapi.CollectionConverters").asScala
        self.sessions = java_class("org.apache.spark.sql.SparkSession")
        self.hadoop_path = java_class("org.apache.hadoop.fs.Path")


_resolved: list[_DeltaClasses] = []  # the one JVM's (a PySpark process has one gateway)
_one_attempt: list[tuple[Any, Any]] = []  # (a session, its clone whose commits try once)


def _classes(spark: SparkSession) -> _DeltaClasses:
    jvm = spark._jvm  # type: ignore[attr-defined]
    if not _resolved or _resolved[0].jvm is not jvm:
        _resolved[:] = [_DeltaClasses(jvm)]
    return _resolved[0]


def _delta_log(spark: SparkSession, path: str) -> Any:
    return _classes(spark).for_table(spark._jsparkSession, path)  # type: ignore[attr-defined]


def _one_attempt_session(spark: SparkSession) -> Any:
    """A clone of ``spark``'s JVM session (its settings as they are now) in which a Delta
    commit makes one attempt; made once per session."""
    session = spark._jsparkSession  # type: ignore[attr-defined]
    if not _one_attempt or _one_attempt[0][0] is not session:
        clone = session.cloneSession()
        clone.conf().set(_MAX_COMMIT_ATTEMPTS, "0")
        _one_attempt[:] = [(session, clone)]
    return _one_attempt[0][1]


@contextmanager
def _active(classes: _DeltaClasses, session: Any) -> Iterator[None]:
    """``session`` as this thread's active JVM session (Delta's transactions take theirs from
    it; PySpark pins each Python thread to a JVM thread of its own), then the one before."""
    before = classes.sessions.getActiveSession()
    classes.sessions.setActiveSession(session)
    try:
        yield
    finally:
        if before.isDefined():
            classes.sessions.setActiveSession(before.get())
        else:
            classes.sessions.clearActiveSession()


def _await_checksums(
    classes: _DeltaClasses,
    session: Any,
    delta_log: Any,
    path: str,
    on_wait: Callable[[], None] | None,
) -> None:
    """Make sure each version another writer committed after ``delta_log``'s snapshot has its
    checksum before Delta loads it: a version loaded before its checksum is written is
    replayed from the log (a Spark job) and keeps no checksum for the commit after it (module
    doc). A missing one is derived here from the version before's and the commit's actions
    (``_derive_checksum``); one that cannot be is waited for (up to ``CHECKSUM_WAIT_S`` in all;
    ``on_wait`` is called first: the other writer may be paused). A table whose versions have
    no checksums is not waited for."""
    snapshot = delta_log.unsafeVolatileSnapshot()
    version = snapshot.version()
    if version < 0 or not snapshot.checksumOpt().isDefined():
        return
    log_path = delta_log.logPath()
    files = log_path.getFileSystem(delta_log.newDeltaHadoopConf())
    deadline = time.monotonic() + CHECKSUM_WAIT_S
    while files.exists(classes.hadoop_path(log_path, f"{version + 1:020d}.json")):
        if files.exists(classes.hadoop_path(log_path, f"{version + 1:020d}.crc")):
            version += 1
        elif _derive_checksum(classes, session, delta_log, snapshot, version + 1):
            log.debug("delta: %s: derived the checksum of version %d", path, version + 1)
            version += 1
        elif time.monotonic() < deadline:
            if on_wait is not None:
                on_wait()
            time.sleep(_CHECKSUM_POLL_S)
        else:
            log.warning(
                "delta: %s has no checksum for version %d after %.1f s; committing without",
                path,
                version + 1,
                CHECKSUM_WAIT_S,
            )
            return


def _derive_checksum(
    classes: _DeltaClasses, session: Any, delta_log: Any, snapshot: Any, version: int
) -> bool:
    """Write the checksum of ``version`` (another writer's commit, whose own process has not
    written it yet: a paused or starved OPTIMIZE) as that writer would: Delta's incremental
    derivation from the previous version's checksum and the commit's actions, no table state.
    False when Delta cannot derive it that way (the caller waits for the writer's own), or
    when this session's commits keep file lists in their checksums (``ALL_FILES_IN_CRC``: a
    derived checksum has none, and the next commit would rebuild it from the table state)."""
    if session.conf().get(ALL_FILES_IN_CRC, "true") != "false":
        return False
    try:
        previous = delta_log.readChecksum(version - 1, classes.none)
        if not previous.isDefined():
            return False
        changes = delta_log.getChanges(version, version, classes.none, True)
        if not changes.hasNext():
            return False
        actions = changes.next()._2()
        info = actions.head() if actions.nonEmpty() else None
        if info is None or info.getClass().getSimpleName() != "CommitInfo":
            return False
        txn = delta_log.startTransaction(classes.none, classes.some(snapshot))
        derived = txn.incrementallyDeriveChecksum(
            session,
            delta_log,
            version,
            actions,
            classes.none,
            classes.none,
            info.operation(),
            info.txnId(),
            classes.right(previous.get()),
            False,
            False,
        )
    except Py4JJavaError as err:  # a log Delta cannot read this way: the writer's own will do
        log.info("delta: no checksum derived for version %d: %s", version, err.java_exception)
        return False
    if derived.isLeft():
        why = derived.swap().toOption().get()
        log.debug("delta: no checksum derived for version %d: %s", version, why)
        return False
    txn.writeChecksumFile(version, derived.toOption().get())  # lost to the writer's own: fine
    return True


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
    on_checksum_wait: Callable[[], None] | None = None,
) -> int | None:
    """Commit data files already written into the Delta table at ``path`` (their ``add``
    actions, ``delta_files.DataFileWriter``) unless ``app_id`` has ``version`` there.

    Returns the number of rows committed (from the files' statistics), or ``None`` when the
    table already holds ``version`` (or a later one) of ``app_id``; the files are then left
    uncommitted, as Delta leaves a failed writer's files, for VACUUM (also when another writer
    of ``app_id`` commits ``version`` while this one tries: only one adds its files). The
    commit carries ``SetTransaction(app_id, version)`` and ``metadata`` as its userMetadata;
    with no file it still records the version (the batch held no row for this table).
    ``on_checksum_wait`` is called when the commit waits for another writer's checksum.

    Raises
    ------
    SchemaMismatchError
        The table's columns are not ``schema_json``'s (a Spark ``StructType`` as JSON), those
        the files were written with.
    TableError
        Other writers took the version ``COMMIT_ATTEMPTS`` times in a row.
    py4j.protocol.Py4JJavaError
        Delta refused the commit.
    """
    classes = _classes(spark)
    none = classes.none
    actions = [classes.action_from_json(json.dumps({"add": dict(add)})) for add in adds]
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
    delta_log = _delta_log(spark, path)
    session = _one_attempt_session(spark)
    with _active(classes, session):
        for _attempt in range(COMMIT_ATTEMPTS):
            _await_checksums(classes, session, delta_log, path, on_checksum_wait)
            txn = delta_log.startTransaction()
            if _txn_version(txn, app_id) >= version:
                return None
            if _committed(txn, _scala_seq(classes, actions), operation, path, app_id, schema_json):
                return sum(int(json.loads(add["stats"])["numRecords"]) for add in adds)
            log.debug("delta: %s: version taken by another writer; committing again", path)
    raise TableError(f"{path}: {COMMIT_ATTEMPTS} commit attempts found the version taken")


def _committed(txn: Any, actions: Any, operation: Any, path: str, app_id: str, schema: str) -> bool:
    """Commit ``actions`` in ``txn`` (one attempt); False when another writer took the
    version first."""
    txn.readTxn().addOne(app_id)  # what txnVersion() does: concurrent commits of app_id conflict
    table_schema = txn.metadata().schemaString()
    if _strip_nullability(json.loads(table_schema)) != _strip_nullability(json.loads(schema)):
        raise SchemaMismatchError(
            f"the files written for {path} do not match its schema {table_schema}"
        )
    try:
        txn.commit(actions, operation)
    except Py4JJavaError as err:
        if _VERSION_TAKEN in str(err.java_exception):
            return False
        raise
    return True
