"""The reput workload's two reference rows: a batch read into ``noop``, and a source -> one
Delta table, each for ``format("rocketmq")`` (the store) and ``format("kafka")`` (the topic).

They separate the source from what the reput does with its rows: the batch read is the source
alone (every column decoded, nothing written), and our source into one Delta table is the
same plan as Kafka's side of the catch-up, so the catch-up's difference is the reput's work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["kafka_reader", "rocketmq_reader", "time_noop_read", "time_stream_to_delta"]


def rocketmq_reader(spark: Any, store_dir: Path, streaming: bool) -> Any:
    """``format("rocketmq")`` over the store, from its start."""
    reader = spark.readStream if streaming else spark.read
    if streaming:
        reader = reader.option("startingOffsets", "earliest").option("maxBytesPerTrigger", "512m")
    return reader.format("rocketmq").load(str(store_dir))


def kafka_reader(spark: Any, servers: str, topic: str, streaming: bool) -> Any:
    """``format("kafka")`` over the topic, from its start, headers included."""
    reader = (spark.readStream if streaming else spark.read).format("kafka")
    return (
        reader.option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
    )


def time_noop_read(frame: Callable[[], Any], runs: int = 2) -> float:
    """The fastest of ``runs`` batch reads of ``frame()`` into ``noop``, in seconds (the
    first pays the source's first use in the session)."""
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        frame().write.format("noop").mode("overwrite").save()
        best = min(best, time.perf_counter() - started)
    return best


def time_stream_to_delta(frame: Any, table: Path) -> tuple[float, int]:
    """A streaming ``frame`` -> one Delta table at ``table`` with ``availableNow``: (seconds
    from start to end, rows)."""
    query = (
        frame.writeStream.format("delta")
        .option("checkpointLocation", str(table.with_name(table.name + "-checkpoint")))
        .trigger(availableNow=True)
    )
    started = time.perf_counter()
    running = query.start(str(table))
    running.awaitTermination()
    seconds = time.perf_counter() - started
    return seconds, sum(p["numInputRows"] for p in running.recentProgress)
