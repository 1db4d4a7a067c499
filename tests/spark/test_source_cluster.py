"""The source on a real Spark standalone cluster: a master and two workers on localhost (each
its own JVM and Python workers), reading a store on a shared path. The driver runs in a
subprocess because this test process already has a local SparkContext."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from source_support import LogWriter, make_record

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPARK_HOME = Path(__import__("pyspark").__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
STARTUP_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, what: str, timeout_s: float = STARTUP_TIMEOUT_S) -> None:  # noqa: ANN001
    # Polls a cluster we do not control the start-up of; bounded, and the failure says what.
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def cluster(tmp_path) -> Iterator[str]:
    env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), PYSPARK_PYTHON=sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    master_port, master_ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{master_port}"
    logs = tmp_path / "cluster-logs"
    logs.mkdir()
    processes: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        with open(logs / f"{name}.log", "wb") as log:
            processes.append(
                subprocess.Popen(
                    [str(SPARK_CLASS), *args],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(master_port), "--webui-port", str(master_ui),
        )  # fmt: skip
        wait_for(lambda: port_open(master_port), "the Spark master")
        for index in range(2):
            work = tmp_path / f"worker{index}"
            work.mkdir()
            start(
                f"worker{index}",
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", str(free_port()), "--work-dir", str(work),
            )  # fmt: skip

        def workers_registered() -> bool:
            text = (logs / "master.log").read_text(errors="replace")
            return text.count("Registering worker") >= 2

        wait_for(workers_registered, "two workers to register with the master")
        yield url
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


DRIVER = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession
    from rmq_spark.spark import source

    master, store, checkpoint = sys.argv[1:4]
    spark = (
        SparkSession.builder.master(master)
        .appName("rmq-source-cluster-test")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executor.memory", "512m")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    source.register(spark)
    df = spark.read.format("rocketmq").option("maxBytesPerPartition", "4000").load(store)
    rows = df.selectExpr("physical_offset", "msg_id", "tags").collect()
    hosts = (
        df.selectExpr("spark_partition_id() p")
        .rdd.map(lambda _: __import__("socket").gethostname() + str(__import__("os").getpid()))
        .distinct()
        .count()
    )
    seen = []
    query = (
        spark.readStream.format("rocketmq")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "40")
        .load(store)
        .writeStream.foreachBatch(
            lambda batch, _: seen.extend(r.physical_offset for r in batch.collect())
        )
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print(json.dumps({
        "partitions": df.rdd.getNumPartitions(),
        "batch": [r.physical_offset for r in rows],
        "msg_ids": [r.msg_id for r in rows],
        "python_workers": hosts,
        "stream": seen,
        "executors": spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size(),
    }))
    spark.stop()
    """
)


def test_source_on_a_standalone_cluster_with_two_workers(cluster, tmp_path):
    writer = LogWriter(tmp_path / "store", segment_size_bytes=8192)
    writer.extend(make_record(i) for i in range(150))
    writer.set_confirm()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    done = subprocess.run(
        [sys.executable, str(script), cluster, str(writer.store_dir), str(tmp_path / "ck")],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    expected = [r.physical_offset for r in writer.records]
    assert result["executors"] == 3  # the driver and one executor per worker
    assert result["partitions"] > 2
    assert result["batch"] == expected
    assert result["stream"] == expected
    assert result["python_workers"] >= 2  # partitions were decoded in more than one process
