"""``[spark] catalog = "hive"``: the reput job's ``rmq.*`` entries persist in Spark's built-in
Hive metastore (Derby), so a new ``spark-sql`` process given the same metastore queries
``rmq.messages`` without registering anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmq_spark.spark.session import DELTA_CATALOG, DELTA_EXTENSION
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPARK_HOME = Path(__import__("pyspark").__file__).parent


def test_reput_tables_are_visible_to_a_new_spark_sql_process(tmp_path: Path) -> None:
    store, tables, metastore = tmp_path / "store", tmp_path / "tables", tmp_path / "metastore"
    with MessageStore.open(StoreConfig(root_dir=store, segment_size_bytes=1 << 20)) as opened:
        opened.put_batch([PutRequest("orders", b"m%d" % i) for i in range(25)])
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_HOME=str(SPARK_HOME))
    reput = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "reput", "--store", str(store),
         "--tables", str(tables), "--available-now",
         "--set", "spark.master=local[1]", "--set", "spark.catalog=hive",
         "--set", f"spark.metastore_dir={metastore}",
         "--set", f"spark.warehouse_dir={tmp_path / 'warehouse'}"],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert reput.returncode == 0, reput.stderr[-3000:]
    derby = f"jdbc:derby:;databaseName={metastore};create=true"
    query = subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-sql"), "--master", "local[1]",
         "--conf", "spark.sql.catalogImplementation=hive",
         "--conf", f"spark.hadoop.javax.jdo.option.ConnectionURL={derby}",
         "--conf", f"spark.sql.warehouse.dir={tmp_path / 'warehouse'}",
         "--conf", f"spark.sql.extensions={DELTA_EXTENSION}",
         "--conf", f"spark.sql.catalog.spark_catalog={DELTA_CATALOG}",
         "-e", "SELECT count(*) FROM rmq.messages WHERE topic = 'orders'"],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert query.returncode == 0, query.stderr[-3000:]
    assert query.stdout.strip().splitlines()[-1].strip() == "25"
