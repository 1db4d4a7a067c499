"""A streaming query with consumerGroup, run as its own process (killed with SIGKILL by
test_consumer_group_kill.py): each batch's bodies go to ``<out>/batch-<id>.json``, written
atomically, so a replayed batch rewrites its own file (the output is exactly once by batch).

Usage: consumer_group_job.py STORE CHECKPOINT OUT BROKER GROUP (processing|available-now)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    store, checkpoint, out, broker, group, mode = argv
    from rmq_spark.spark.config import SparkConfig
    from rmq_spark.spark.session import build_session

    spark = build_session(
        SparkConfig(
            master="local[1]",
            app_name="consumer-group-job",
            shuffle_partitions=1,
            ui_enabled=False,
            log_level="ERROR",
            warehouse_dir=Path(out) / "warehouse",
        )
    )
    Path(out).mkdir(parents=True, exist_ok=True)

    def write(df: Any, batch_id: int) -> None:
        bodies = [bytes(r.body).decode() for r in df.select("body").collect()]
        path = Path(out) / f"batch-{batch_id}.json"
        temp = path.with_suffix(".tmp")
        temp.write_text(json.dumps(bodies))
        os.replace(temp, path)
        time.sleep(0.3)  # room for a kill between batches and inside one

    reader = (
        spark.readStream.format("rocketmq")
        .option("topics", "orders")
        .option("consumerGroup", group)
        .option("brokers", broker)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "25")
    )
    writer = reader.load(store).writeStream.foreachBatch(write)
    writer = writer.option("checkpointLocation", checkpoint)
    if mode == "available-now":
        writer.trigger(availableNow=True).start().awaitTermination()
    else:
        writer.trigger(processingTime="100 milliseconds").start().awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
