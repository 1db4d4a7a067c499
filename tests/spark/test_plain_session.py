"""format("rocketmq") in sessions the project did not build: a plain Python session and a
real spark-sql process find the source through the installed pyspark_rocketmq package (Spark
4's static registration of Python data sources), with nothing registered by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from source_support import LogWriter, make_record

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SPARK_BIN = Path(__import__("pyspark").__file__).parent / "bin"
RECORDS = 25

PLAIN = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
print("ROWS", spark.read.format("rocketmq").load(sys.argv[1]).count())
"""


@pytest.fixture
def store(tmp_path: Path) -> Path:
    writer = LogWriter(tmp_path / "store", segment_size_bytes=8192)
    writer.extend(make_record(i) for i in range(RECORDS))
    writer.set_confirm()
    return writer.store_dir


def fresh_env() -> dict[str, str]:
    """An installed rmq-spark as Spark sees it: this tree on the Python path of the driver
    and of the Python workers Spark starts, nothing else of the project's set up."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYSPARK_PYTHON"] = sys.executable
    return env


def test_a_plain_python_session_reads_format_rocketmq(store: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PLAIN, str(store)],
        env=fresh_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert f"ROWS {RECORDS}" in done.stdout, done.stderr[-3000:]


def test_spark_sql_reads_a_view_using_rocketmq(store: Path, tmp_path: Path) -> None:
    # A temporary view: a persistent table (CREATE TABLE ... USING rocketmq) keeps its path as
    # the table's location, which Spark 4.2 does not hand to a Python source's reader.
    view = f"CREATE TEMPORARY VIEW t USING rocketmq OPTIONS (path '{store}')"
    statements = f"{view}; SELECT count(*) FROM t;"
    done = subprocess.run(
        [
            str(SPARK_BIN / "spark-sql"),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            f"spark.sql.warehouse.dir={tmp_path / 'warehouse'}",
            "-e",
            statements,
        ],  # fmt: skip
        env=fresh_env(),
        cwd=tmp_path,  # the embedded metastore (metastore_db/) goes here
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1:] == [str(RECORDS)], done.stdout
