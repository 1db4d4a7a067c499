"""The source on a real Spark standalone cluster: a master and two workers on localhost (each
its own JVM and Python workers), reading a store on a shared path. The driver runs in a
subprocess because this test process already has a local SparkContext."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from source_support import LogWriter, make_record

pytestmark = [pytest.mark.spark, pytest.mark.slow]

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
