"""Where the reput tables' catalog entries live, and whether a new session may open it.

``[spark] catalog = "hive"`` (the default) keeps ``rmq.*`` in Spark's built-in Hive metastore:
embedded Derby in ``<tables_dir>/_catalog/metastore_db`` (or ``[spark] metastore_dir``), the
warehouse and ``derby.log`` beside it. Every process that names the same tables directory (the
reput job, a notebook's ``build_session(tables_dir=...)``, ``rmq-spark sql``) opens the same
entries, wherever it was started from.

Embedded Derby admits one JVM at a time: while booted it holds a lock on
``metastore_db/dbex.lck`` (Java's ``FileChannel.tryLock``, an fcntl lock on Linux, visible to
``F_GETLK`` from any process). A session that would open a metastore another JVM holds gets the
in-memory catalog instead (``metastore_in_use``) and registers the tables itself; concurrent
sessions sharing one catalog need an external metastore (docs/TABLES.md, "Catalog").
"""

from __future__ import annotations

import fcntl
import os
import struct
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.spark.config import SparkConfig

__all__ = [
    "CATALOG_DIR",
    "CONNECTION_URL",
    "IMPLEMENTATION",
    "METASTORE_URIS",
    "MetastoreInUse",
    "catalog_conf",
    "derby_folder",
    "derby_log_option",
    "lock_holder",
    "metastore_in_use",
    "register_statements",
]

CATALOG_DIR = "_catalog"  # under the tables directory: metastore_db/, warehouse/, derby.log
IMPLEMENTATION = "spark.sql.catalogImplementation"
CONNECTION_URL = "spark.hadoop.javax.jdo.option.ConnectionURL"
METASTORE_URIS = "spark.hadoop.hive.metastore.uris"
# Hive's own default when no ConnectionURL is set: Derby in the working directory.
_HIVE_DEFAULT_URL = "jdbc:derby:;databaseName=metastore_db;create=true"
# struct flock on Linux (64-bit off_t): l_type, l_whence, l_start, l_len, l_pid.
_FLOCK = "hhqqi4x"


def catalog_conf(config: SparkConfig, tables_dir: str | Path | None) -> dict[str, str]:
    """The catalog settings of a session that names ``tables_dir`` (empty: in-memory).

    ``catalog = "hive"`` puts Derby at ``metastore_dir``, else beside the tables; a session
    naming neither has no tables whose entries could persist and stays in memory.
    """
    if config.catalog != "hive":
        return {}
    if config.metastore_dir is not None:
        metastore = Path(config.metastore_dir).absolute()
    elif tables_dir is not None:
        metastore = Path(tables_dir).absolute() / CATALOG_DIR / "metastore_db"
    else:
        return {}
    warehouse = config.warehouse_dir or metastore.parent / "warehouse"
    return {
        IMPLEMENTATION: "hive",
        CONNECTION_URL: f"jdbc:derby:;databaseName={metastore};create=true",
        "spark.sql.warehouse.dir": str(Path(warehouse).absolute()),
    }


@dataclass(frozen=True, slots=True)
class MetastoreInUse:
    """An embedded Derby metastore another process holds."""

    metastore_dir: Path
    pid: int | None  # the holder (None: the platform does not say)

    def describe(self) -> str:
        holder = "another JVM" if self.pid is None else f"another JVM (pid {self.pid})"
        return f"the Hive metastore {self.metastore_dir} is in use by {holder}"


def metastore_in_use(
    conf: Mapping[str, str], own_pids: Collection[int] = ()
) -> MetastoreInUse | None:
    """The embedded Derby metastore ``conf`` would open, when a process other than
    ``own_pids`` (this driver's JVM: Derby stays booted there across sessions) holds it.

    ``None`` for the in-memory catalog, an external metastore and a free Derby.
    """
    if conf.get(IMPLEMENTATION) != "hive" or conf.get(METASTORE_URIS):
        return None
    folder = derby_folder(conf.get(CONNECTION_URL, _HIVE_DEFAULT_URL))
    if folder is None:
        return None
    held, pid = lock_holder(folder / "dbex.lck")
    if not held or (pid is not None and pid in own_pids):
        return None
    return MetastoreInUse(folder, pid)


def derby_folder(url: str) -> Path | None:
    """The database folder of an embedded Derby JDBC URL (``None``: not embedded Derby).

    Examples
    --------
    >>> derby_folder("jdbc:derby:;databaseName=/m/metastore_db;create=true")
    PosixPath('/m/metastore_db')
    >>> derby_folder("jdbc:derby:/m/db;create=true"), derby_folder("jdbc:derby://h:1527/db")
    (PosixPath('/m/db'), None)
    """
    if not url.startswith("jdbc:derby:") or url.startswith("jdbc:derby://"):
        return None
    name, *attributes = url.removeprefix("jdbc:derby:").split(";")
    for attribute in attributes:
        key, _, value = attribute.partition("=")
        if key.strip() == "databaseName":
            name = value.strip()
    name = name.removeprefix("directory:")
    if not name or name.startswith(("memory:", "classpath:", "jar:")):
        return None
    return Path(name).absolute()


def lock_holder(path: Path) -> tuple[bool, int | None]:
    """Whether another process holds an fcntl lock on ``path``, and its pid when known.

    Probes with ``F_GETLK`` on Linux: it takes no lock, so a JVM booting Derby at the same
    moment is never refused because of this check. A missing file is free.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False, None
    try:
        if sys.platform.startswith("linux"):
            probe = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
            answer = fcntl.fcntl(fd, fcntl.F_GETLK, probe)
            kind, _whence, _start, _length, pid = struct.unpack(_FLOCK, answer)
            return kind != fcntl.F_UNLCK, (pid if kind != fcntl.F_UNLCK else None)
        return _lockf_probe(path), None
    finally:
        os.close(fd)


def _lockf_probe(path: Path) -> bool:
    """Elsewhere: try the lock itself and let it go at once."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def derby_log_option(conf: Mapping[str, str]) -> tuple[str, Path] | None:
    """``("derby.stream.error.file", <metastore's folder>/derby.log)`` for a session on embedded
    Derby (otherwise Derby writes ``derby.log`` into the working directory)."""
    if conf.get(IMPLEMENTATION) != "hive" or conf.get(METASTORE_URIS):
        return None
    folder = derby_folder(conf.get(CONNECTION_URL, _HIVE_DEFAULT_URL))
    return None if folder is None else ("derby.stream.error.file", folder.parent / "derby.log")


def register_statements(tables_dir: str | Path, database: str = "rmq") -> list[str]:
    """SQL that registers the existing reput tables of ``tables_dir`` in ``database`` (for a
    ``spark-sql`` started with the in-memory catalog: its ``-i`` init file)."""
    from rmq_spark.spark.tables import TABLE_NAMES, table_path

    statements = [f"CREATE DATABASE IF NOT EXISTS {database}"]
    for name in TABLE_NAMES:
        path = table_path(tables_dir, name)
        if (path / "_delta_log").is_dir():
            location = str(path).replace("\\", "\\\\").replace("'", "\\'")
            statements.append(
                f"CREATE TABLE IF NOT EXISTS {database}.{name} USING delta LOCATION '{location}'"
            )
    return statements
