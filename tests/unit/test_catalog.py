"""Where the catalog lives (``catalog_conf``), when a metastore is held by another process
(``lock_holder``, ``metastore_in_use``) and what ``rmq-spark sql`` runs. No JVM here:
tests/spark/test_catalog_hive.py holds the metastore with a real spark-sql JVM."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq_spark.config import load_config
from rmq_spark.spark.catalog import (
    CONNECTION_URL,
    IMPLEMENTATION,
    METASTORE_URIS,
    catalog_conf,
    derby_folder,
    derby_log_option,
    lock_holder,
    metastore_in_use,
    register_statements,
)
from rmq_spark.spark.config import SparkConfig

# Holds an fcntl lock on argv[1] (as Derby's JVM does on dbex.lck) until stdin closes.
HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def held_metastore(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    folder = tmp_path / "tables" / "_catalog" / "metastore_db"
    folder.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder / "dbex.lck")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    yield folder, holder.pid
    holder.communicate("")


def test_the_default_catalog_is_hive_beside_the_tables(tmp_path: Path) -> None:
    conf = catalog_conf(SparkConfig(), tmp_path / "tables")
    assert conf == {
        IMPLEMENTATION: "hive",
        CONNECTION_URL: (
            f"jdbc:derby:;databaseName={tmp_path}/tables/_catalog/metastore_db;create=true"
        ),
        "spark.sql.warehouse.dir": f"{tmp_path}/tables/_catalog/warehouse",
    }
    assert derby_log_option(conf) == (
        "derby.stream.error.file",
        tmp_path / "tables" / "_catalog" / "derby.log",
    )


def test_no_tables_or_in_memory_means_no_metastore(tmp_path: Path) -> None:
    assert catalog_conf(SparkConfig(), None) == {}
    assert catalog_conf(SparkConfig(catalog="in-memory"), tmp_path) == {}
    explicit = catalog_conf(SparkConfig(metastore_dir=tmp_path / "m"), None)
    assert explicit[CONNECTION_URL] == f"jdbc:derby:;databaseName={tmp_path}/m;create=true"


def test_the_config_file_agrees_for_every_process(tmp_path: Path) -> None:
    config = load_config(None, {"reput.tables_dir": str(tmp_path / "t")})
    assert config.spark.catalog == "hive"
    assert catalog_conf(config.spark, config.reput.tables_dir) == catalog_conf(
        SparkConfig(), tmp_path / "t"
    )


@pytest.mark.parametrize(
    ("url", "folder"),
    [
        ("jdbc:derby:;databaseName=/m/metastore_db;create=true", Path("/m/metastore_db")),
        ("jdbc:derby:/m/db;create=true", Path("/m/db")),
        ("jdbc:derby:directory:/m/db", Path("/m/db")),
        ("jdbc:derby:memory:db;create=true", None),
        ("jdbc:derby://host:1527/db", None),
        ("jdbc:postgresql://host/metastore", None),
    ],
)
def test_derby_folder(url: str, folder: Path | None) -> None:
    assert derby_folder(url) == folder


def test_a_lock_held_by_another_process_is_seen_with_its_pid(
    held_metastore: tuple[Path, int],
) -> None:
    folder, pid = held_metastore
    assert lock_holder(folder / "dbex.lck") == (True, pid)
    conf = catalog_conf(SparkConfig(), folder.parent.parent)
    in_use = metastore_in_use(conf)
    assert in_use is not None and (in_use.metastore_dir, in_use.pid) == (folder, pid)
    assert f"in use by another JVM (pid {pid})" in in_use.describe()
    # Our own JVM may hold it (Derby stays booted there after a session stops).
    assert metastore_in_use(conf, own_pids={pid}) is None
    # An external metastore or the in-memory catalog is never probed.
    assert metastore_in_use({**conf, METASTORE_URIS: "thrift://h:9083"}) is None
    assert metastore_in_use({**conf, IMPLEMENTATION: "in-memory"}) is None


def test_a_free_or_missing_lock_file_is_free(tmp_path: Path) -> None:
    assert lock_holder(tmp_path / "missing") == (False, None)
    (tmp_path / "dbex.lck").write_bytes(b"\0\0\0\0")
    assert lock_holder(tmp_path / "dbex.lck") == (False, None)
    assert metastore_in_use(catalog_conf(SparkConfig(), tmp_path)) is None


def test_sql_command_falls_back_with_an_init_file(
    held_metastore: tuple[Path, int], caplog: pytest.LogCaptureFixture
) -> None:
    from rmq_spark.cli.sql_command import spark_sql_command, sql_conf

    folder, pid = held_metastore
    tables = folder.parent.parent
    (tables / "messages" / "_delta_log").mkdir(parents=True)
    config = load_config(None, {"spark.master": "local[1]"})
    conf, statements = sql_conf(config, tables)
    assert conf[IMPLEMENTATION] == "in-memory"
    assert statements == [
        "CREATE DATABASE IF NOT EXISTS rmq",
        f"CREATE TABLE IF NOT EXISTS rmq.messages USING delta LOCATION '{tables}/messages'",
    ]
    (line,) = [r.getMessage() for r in caplog.records if "in use by" in r.getMessage()]
    assert f"(pid {pid})" in line and "in-memory catalog" in line
    command = spark_sql_command(Path("/spark"), conf, ["-e", "SELECT 1"])
    assert command[:3] == ["/spark/bin/spark-sql", "--master", "local[1]"]
    assert command[-2:] == ["-e", "SELECT 1"]
    assert f"{IMPLEMENTATION}=in-memory" in command


def test_sql_command_on_a_free_metastore_keeps_derby_log_beside_it(tmp_path: Path) -> None:
    from rmq_spark.cli.sql_command import sql_conf

    conf, statements = sql_conf(load_config(None), tmp_path / "tables")
    assert conf[IMPLEMENTATION] == "hive"
    # Registered also into the persistent catalog: tables built with the in-memory one (the
    # demo, an older job) have no entries there yet; IF NOT EXISTS keeps existing ones.
    assert statements == ["CREATE DATABASE IF NOT EXISTS rmq"]
    derby_log = tmp_path / "tables" / "_catalog" / "derby.log"
    assert conf["spark.driver.extraJavaOptions"].endswith(f"-Dderby.stream.error.file={derby_log}")


def test_register_statements_skip_missing_tables(tmp_path: Path) -> None:
    assert register_statements(tmp_path, "db") == ["CREATE DATABASE IF NOT EXISTS db"]
