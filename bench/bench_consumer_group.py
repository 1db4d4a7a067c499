"""The cost of ``consumerGroup`` on a streaming query: put -> row latency with and without it.

A broker process serves a store; a thread sends a message every ``--interval-ms`` through
it (gRPC); the same query (0-second trigger, foreachBatch sink) runs twice, without and with
``consumerGroup`` + ``brokers`` (each trigger then translates the committed end into queue
offsets and, when they moved, commits them: GetOffset + UpdateOffset per queue). Prints
p50/p99 put -> sink latency (store timestamp to the sink's clock) and the median
``latestOffset`` part of the triggers (where the group commit runs).

    .venv/bin/python bench/bench_consumer_group.py --seconds 15 --queues 4
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BODY_BYTES = 256


def start_broker(store: Path, work: Path, queues: int) -> tuple[subprocess.Popen[bytes], str]:
    ready = work / "ready"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "rmq_spark.broker.server", "--store", str(store),
            "--listen", "127.0.0.1:0", "--ready-file", str(ready),
            "--set", f"broker.topics=Latency:{queues}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=(work / "broker.log").open("wb"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    end = time.monotonic() + 60
    while not (ready.exists() and ready.read_text().endswith("\n")):
        if proc.poll() is not None or time.monotonic() > end:
            raise SystemExit(f"broker did not start: {(work / 'broker.log').read_text()}")
        time.sleep(0.05)
    return proc, ready.read_text().strip()


def run(
    spark: Any, store: Path, address: str, work: Path, name: str, options: dict[str, str],
    seconds: float, warmup_s: float, interval_ms: float,
) -> tuple[list[float], float]:  # fmt: skip
    from rmq_spark.broker.producer import Producer

    latencies: list[float] = []

    def sink(df: Any, batch_id: int) -> None:
        stamps = [r.ts for r in df.selectExpr("unix_micros(store_timestamp) ts").collect()]
        now_us = time.time_ns() // 1000
        latencies.extend((now_us - ts) / 1000 for ts in stamps)

    query = (
        spark.readStream.format("rocketmq")
        .option("startingOffsets", "latest")
        .option("topics", "Latency")
        .options(**options)
        .load(str(store))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(work / name / "ck"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    stop = threading.Event()
    with Producer(address) as producer:

        def produce() -> None:
            while not stop.is_set():
                producer.send("Latency", b"x" * BODY_BYTES)
                stop.wait(interval_ms / 1000)

        thread = threading.Thread(target=produce, daemon=True)
        try:
            producer.send("Latency", b"warm-up")
            query.processAllAvailable()
            thread.start()
            time.sleep(warmup_s)  # a benchmark: it measures over wall-clock time
            latencies.clear()
            warmed_at = time.time()
            time.sleep(seconds)
            stop.set()
            thread.join()
            query.processAllAvailable()
            parts = [
                p["durationMs"].get("latestOffset", 0)
                for p in query.recentProgress
                if p["numInputRows"] and _epoch_s(p["timestamp"]) >= warmed_at
            ]
        finally:
            query.stop()
    return latencies, statistics.median(parts) if parts else 0.0


def _epoch_s(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup-seconds", type=float, default=5.0)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)

    from rmq_spark.spark.config import SparkConfig
    from rmq_spark.spark.session import build_session

    work = Path(tempfile.mkdtemp(prefix="bench-group-"))
    broker, address = start_broker(work / "store", work, args.queues)
    try:
        spark = build_session(
            SparkConfig(master=args.master, shuffle_partitions=2, log_level="ERROR"),
            extra_conf={"spark.pyspark.python": sys.executable},
        )
        for name, options in (
            ("plain", {}),
            ("group", {"consumerGroup": "bench", "brokers": address}),
        ):
            latencies, latest_ms = run(
                spark, work / "store", address, work, name, options,
                args.seconds, args.warmup_seconds, args.interval_ms,
            )  # fmt: skip
            print(
                f"{name:5}: {len(latencies):,} rows, put->row p50 {_pct(latencies, 0.5):.1f} ms, "
                f"p99 {_pct(latencies, 0.99):.1f} ms, median latestOffset {latest_ms:.0f} ms"
            )
        spark.stop()
    finally:
        broker.terminate()
        broker.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
