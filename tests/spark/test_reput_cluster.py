"""The reput job on a real standalone cluster (a master and two workers started by the test),
submitted as a user would: ``spark-submit --master spark://... --py-files rmq_spark.zip
jobs/reput.py --store file://... --tables file://...``. Driver and executors run a Python
that has the dependencies but *not* rmq_spark (``-S``: the checkout's editable install is
invisible), so the package reaches them only through ``--py-files`` (``make package``), with no
``PYTHONPATH``."""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(__import__("pyspark").__file__).parent


def _python_without_rmq_spark(tmp_path: Path) -> Path:
    packages = ":".join(site.getsitepackages())
    wrapper = tmp_path / "python-without-rmq-spark"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{packages}" exec {sys.executable} -S "$@"\n'
    )
    wrapper.chmod(0o755)
    probe = subprocess.run(
        [str(wrapper), "-c", "import pyarrow, pyspark; import rmq_spark"],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert "No module named 'rmq_spark'" in probe.stderr, probe.stderr
    return wrapper


def test_reput_job_on_a_standalone_cluster_from_the_package_zip(cluster, tmp_path):
    store, tables = tmp_path / "store", tmp_path / "tables"
    config = StoreConfig(root_dir=store, segment_size_bytes=64 * 1024)
    with MessageStore.open(config) as opened:
        for start in range(0, 600, 100):
            opened.put_batch(
                [
                    PutRequest("orders", b"o%d" % i, keys=(f"k{i}",))
                    for i in range(start, start + 100)
                ]
            )
    package = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "package.py"), str(tmp_path / "dist")],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    python = _python_without_rmq_spark(tmp_path)
    env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), PYSPARK_PYTHON=str(python))
    env["PYSPARK_DRIVER_PYTHON"] = str(python)
    # --py-files alone: no PYTHONPATH for the Python processes the driver's JVM starts itself
    # (the streaming source's runner), which Spark points at an empty folder (py_files.py).
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [
            str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster,
            "--py-files", package,
            "--conf", "spark.executor.memory=512m",
            "--conf", "spark.sql.shuffle.partitions=2",
            str(REPO / "jobs" / "reput.py"),
            "--store", f"file://{store}", "--tables", f"file://{tables}",
            "--available-now", "--max-bytes-per-trigger", str(16 * 1024),
        ],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]

    from rmq_spark.spark.query_local import local_messages_by_key, local_messages_by_time

    every = local_messages_by_time(tables, "orders")
    assert every.num_rows == 600
    assert every.column("body").to_pylist() == [b"o%d" % i for i in range(600)]
    assert local_messages_by_key(tables, "orders", "k599").num_rows == 1
    apps = list((tmp_path / "worker0").iterdir()) + list((tmp_path / "worker1").iterdir())
    assert apps, "the executors ran on the workers"
