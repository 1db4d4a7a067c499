"""A streaming query for the sink's kill test: copy a store's topic ``in`` into topic ``out``
of another store (a path) or a broker (``--brokers``) with writeStream.format("rocketmq"),
availableNow, so that SIGKILL and a restart from the same checkpoint can be checked."""

from __future__ import annotations

import argparse

from rmq_spark.spark.config import SparkConfig
from rmq_spark.spark.session import build_session
from rmq_spark.spark.source import register


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--output", help="the output store (embedded)")
    parser.add_argument("--brokers", help="the output broker's host:port")
    parser.add_argument("--per-trigger", default="10000")
    args = parser.parse_args()
    spark = build_session(
        SparkConfig(
            master="local[2]", app_name="sink-kill", shuffle_partitions=2, ui_enabled=False,
            log_level="ERROR",
        )
    )  # fmt: skip
    register(spark)
    source = (
        spark.readStream.format("rocketmq")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", args.per_trigger)
        .option("topics", "in")
        .load(args.input)
        .selectExpr("'out' AS topic", "body", "tags")
    )
    writer = (
        source.writeStream.format("rocketmq")
        .option("checkpointLocation", args.checkpoint)
        .option("batchMessages", "200")
        .trigger(availableNow=True)
    )
    if args.brokers:
        query = writer.option("brokers", args.brokers).start()
    else:
        query = writer.option("store.segment_size_bytes", str(64 << 20)).start(args.output)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
