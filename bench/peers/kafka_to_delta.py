"""Kafka's side of visible.py, in a process of its own: Spark's Kafka source -> one Delta
table, 1 s trigger, until SIGTERM. Prints "started" once the query runs.

Usage: python kafka_to_delta.py BOOTSTRAP TOPIC[,TOPIC...] TABLE_DIR (the rows carry their topic)
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from kafka_peer import resolve_jars  # noqa: E402


def _create_topics(spark, servers: str, topics: list[str]) -> None:  # noqa: ANN001
    """Create the topics (the broker's default partitions) before the query starts: Spark's
    Kafka source fails on a subscription of several topics of which one does not exist."""
    jvm = spark._jvm
    admin_api = jvm.org.apache.kafka.clients.admin
    props = jvm.java.util.Properties()
    props.put("bootstrap.servers", servers)
    admin = admin_api.Admin.create(props)
    try:
        new_topics = jvm.java.util.ArrayList()
        empty = jvm.java.util.Optional.empty()
        for name in topics:
            new_topics.add(admin_api.NewTopic(name, empty, empty))
        admin.createTopics(new_topics).all().get()
    finally:
        admin.close()


def main(servers: str, topic: str, table: Path) -> int:
    from rmq_spark.spark.config import SparkConfig
    from rmq_spark.spark.session import build_session, session_conf

    config = SparkConfig(master="local[2]", shuffle_partitions=2, log_level="ERROR")
    jars = [session_conf(config).get("spark.jars", ""), *map(str, resolve_jars("spark-kafka"))]
    extra = (f"spark.jars={','.join(jar for jar in jars if jar)}",)
    spark = build_session(dataclasses.replace(config, extra_conf=extra))
    _create_topics(spark, servers, topic.split(","))
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("delta")
        .option("checkpointLocation", str(table.with_name(table.name + "-checkpoint")))
        .trigger(processingTime="1 second")
        .start(str(table))
    )
    signal.signal(signal.SIGTERM, lambda *_: query.stop())
    print("started", flush=True)
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
