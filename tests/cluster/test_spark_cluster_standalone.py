"""A real standalone Spark cluster (a master and two workers, ``tests/spark/conftest.py``'s
fixture) reading a two-broker rmq-spark cluster through its name server: the driver discovers
both stores, the executors on the workers read them (each checks the store is readable on its
host first), and every message comes back once with its ``broker_name``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_harness import ClusterBroker, cluster_brokers, wait_route
from namesrv_harness import Namesrv
from spark.conftest import SPARK_HOME
from spark.conftest import cluster as standalone  # noqa: F401  (a fixture)

from rmq_spark.broker.producer import Producer

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TOPIC = "Standalone"
COUNT = 300
JOB = """
import json, sys
from pyspark.sql import SparkSession
from rmq_spark.spark.source import register
spark = SparkSession.builder.getOrCreate()
register(spark)
rows = (spark.read.format("rocketmq").option("namesrv", sys.argv[1]).load()
        .where("topic = 'Standalone'").select("broker_name", "uniq_key").collect())
json.dump({"rows": [[r.broker_name, r.uniq_key] for r in rows],
           "master": spark.sparkContext.master}, open(sys.argv[2], "w"))
spark.stop()
"""


@pytest.fixture
def two(tmp_path: Path, namesrv: Namesrv) -> Iterator[list[ClusterBroker]]:
    yield from cluster_brokers(tmp_path, namesrv, f"broker.topics={TOPIC}:4",
                               "broker.auto_create_topics=false")  # fmt: skip


def test_a_standalone_spark_cluster_reads_both_brokers_once(
    standalone: str,  # noqa: F811  (the fixture imported above)
    namesrv: Namesrv,
    two: list[ClusterBroker],
    tmp_path: Path,
) -> None:
    for broker in two:
        wait_route(broker.address, TOPIC, {"broker-a", "broker-b"})
    with Producer(two[0].address) as producer:
        sent = {producer.send(TOPIC, b"x%d" % i).message_id: "" for i in range(COUNT)}
    job, out = tmp_path / "job.py", tmp_path / "out.json"
    job.write_text(JOB)
    env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, PYTHONPATH=str(REPO))  # fmt: skip
    done = subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", standalone,
         "--conf", "spark.executor.memory=512m",
         "--conf", f"spark.executorEnv.PYTHONPATH={REPO}",
         str(job), namesrv.addr, str(out)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["master"] == standalone
    keys = [key for _, key in result["rows"]]
    assert sorted(keys) == sorted(sent)  # every message once
    assert {name for name, _ in result["rows"]} == {"broker-a", "broker-b"}
    apps = list((tmp_path / "worker0").iterdir()) + list((tmp_path / "worker1").iterdir())
    assert apps, "the executors ran on the workers"
