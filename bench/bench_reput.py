"""Benchmark of the reput job (log -> consume_queue, message_index, messages in Delta).

Measures in one run, each next to a baseline from the same run:

* throughput: messages/s of an ``availableNow`` reput into all three tables, next to the
  ``rocketmq`` source alone writing the same log to Spark's ``noop`` sink (ratio reput/source);
* latency: put-to-visible in ``consume_queue`` with a 1 s trigger: a thread puts a message
  every ``--interval-ms`` through a real ``MessageStore`` (SYNC flush); the batch writer's
  report carries the clock time the consume_queue commit landed, so ``that - store time`` is
  when a ``SELECT`` on rmq.consume_queue could first see the message (p50/p99; 2 s / 5 s);
* baseline for both: one 100-row Delta append in the same session (the floor of a commit);
* lookups on the large table after OPTIMIZE: by key (``messages_by_key``) and by offset message
  id (``message_by_msg_id``, straight from the CommitLog) as median milliseconds and files
  read, next to the same questions asked without the clustering key (full scans).

The store is written by ``bench_source.write_store`` (every message has TAGS, KEYS, UNIQ_KEY).

Usage::

    python bench/bench_reput.py                       # 200,000 messages, a few minutes
    python bench/bench_reput.py --messages 10000000   # the issue's 10M-row lookup table
    python bench/bench_reput.py --skip-latency --lookups 50
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from bench_source import write_store  # noqa: E402

from rmq_spark.spark.config import SparkConfig  # noqa: E402
from rmq_spark.spark.query import message_by_msg_id  # noqa: E402
from rmq_spark.spark.reput import run_reput, start_reput  # noqa: E402
from rmq_spark.spark.reput_config import ReputConfig  # noqa: E402
from rmq_spark.spark.session import build_session  # noqa: E402
from rmq_spark.spark.tables import (  # noqa: E402
    MESSAGE_INDEX,
    MESSAGES,
    optimize_tables,
    table_path,
)
from rmq_spark.store.delay_levels import (  # noqa: E402
    DEFAULT_MESSAGE_DELAY_LEVEL,
    parse_message_delay_level,
)
from rmq_spark.store.hashing import index_key_hash  # noqa: E402

LEVELS = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)


def bench_source_noop(spark, store: Path, checkpoint: Path) -> tuple[int, float]:  # noqa: ANN001
    query = (
        spark.readStream.format("rocketmq")
        .option("startingOffsets", "earliest")
        .load(str(store))
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    started = time.perf_counter()
    running = query.start()
    running.awaitTermination()
    seconds = time.perf_counter() - started
    return sum(p["numInputRows"] for p in running.recentProgress), seconds


def bench_reput(spark, store: Path, tables: Path, batch_bytes: int) -> tuple[int, float, int]:  # noqa: ANN001
    config = ReputConfig(
        tables_dir=tables,
        available_now=True,
        max_bytes_per_trigger=batch_bytes,
        optimize_interval_batches=0,
    )
    started = time.perf_counter()
    writer = run_reput(spark, store, config, LEVELS)
    return writer.messages_written, time.perf_counter() - started, writer.batches_written


def bench_delta_append(spark, path: Path, count: int = 7) -> float:  # noqa: ANN001
    rows = spark.range(100).selectExpr("id AS a", "CAST(id AS STRING) AS b").coalesce(1)
    samples = []
    for version in range(count):
        started = time.perf_counter()
        rows.write.format("delta").mode("append").option("txnAppId", "bench").option(
            "txnVersion", str(version)
        ).save(str(path))
        samples.append(time.perf_counter() - started)
    return statistics.median(samples[1:])


def files_read(spark, frame) -> tuple[int, int]:  # noqa: ANN001
    """(rows, files read by the scans) of executing ``frame``, from the scan nodes' metrics."""
    plan = frame._jdf.queryExecution().executedPlan()
    rows = plan.executeCollect()
    total = 0
    stack = [plan]
    while stack:
        node = stack.pop()
        metrics = node.metrics()
        if metrics.contains("numFiles"):
            total += int(metrics.apply("numFiles").value())
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return len(rows), total


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def bench_lookups(spark, store: Path, tables: Path, count: int, lookups: int) -> None:  # noqa: ANN001
    from pyspark.sql import functions as F

    rng = random.Random(11)
    index = spark.read.format("delta").load(str(table_path(tables, MESSAGE_INDEX)))
    messages = spark.read.format("delta").load(str(table_path(tables, MESSAGES)))
    total_files = {
        name: spark.sql(f"DESCRIBE DETAIL delta.`{table_path(tables, name)}`").first()["numFiles"]
        for name in (MESSAGE_INDEX, MESSAGES)
    }
    skip_t, skip_files, scan_t, scan_files = [], [], [], []
    for _ in range(lookups):
        key = f"key-{rng.randrange(count):010d}"
        clustered = index.where(
            (F.col("key_hash") == F.lit(index_key_hash(f"BenchTopic#{key}")))
            & (F.col("topic") == "BenchTopic")
            & (F.col("key") == key)
        )
        started = time.perf_counter()
        rows, files = files_read(spark, clustered)
        skip_t.append(time.perf_counter() - started)
        skip_files.append(files)
        assert rows == 1, (key, rows)
        unclustered = index.where((F.col("topic") == "BenchTopic") & (F.col("key") == key))
        started = time.perf_counter()
        rows, files = files_read(spark, unclustered)
        scan_t.append(time.perf_counter() - started)
        scan_files.append(files)
    print(
        f"lookup by key, message_index ({total_files[MESSAGE_INDEX]} files): "
        f"key_hash filter {_median_ms(skip_t):.0f} ms, {statistics.median(skip_files):.0f} "
        f"files read; without it {_median_ms(scan_t):.0f} ms, "
        f"{statistics.median(scan_files):.0f} files; "
        f"ratio {statistics.median(scan_t) / statistics.median(skip_t):.1f}x"
    )
    ids = [
        row.msg_id
        for row in messages.select("msg_id").sample(0.01, seed=3).limit(lookups).collect()
    ]
    direct_t, table_t, table_files = [], [], []
    for msg_id in ids:
        started = time.perf_counter()
        message_by_msg_id(store, msg_id)
        direct_t.append(time.perf_counter() - started)
        started = time.perf_counter()
        rows, files = files_read(spark, messages.where(F.col("msg_id") == msg_id))
        table_t.append(time.perf_counter() - started)
        table_files.append(files)
        assert rows == 1
    print(
        f"lookup by msg id: CommitLog read {_median_ms(direct_t):.2f} ms (0 table files, 1 "
        f"record); messages table WHERE msg_id = ... {_median_ms(table_t):.0f} ms, "
        f"{statistics.median(table_files):.0f} of {total_files[MESSAGES]} files; "
        f"ratio {statistics.median(table_t) / statistics.median(direct_t):.0f}x"
    )


def bench_latency(spark, work: Path, seconds: float, interval_ms: float) -> list[float]:  # noqa: ANN001
    from rmq_spark.store.config import StoreConfig
    from rmq_spark.store.message_store import MessageStore
    from rmq_spark.store.put import PutRequest

    store_dir = work / "latency-store"
    store = MessageStore.open(StoreConfig(root_dir=store_dir, segment_size_bytes=1 << 24))
    put_ms: dict[int, int] = {}
    latencies: list[float] = []
    lock = threading.Lock()

    def on_batch(report) -> None:  # noqa: ANN001
        # When the consume_queue commit landed (it goes first), else now.
        visible_ms = report.consume_queue_visible_ms or time.time_ns() // 1_000_000
        with lock:
            for offset, stored in list(put_ms.items()):
                if report.start_offset <= offset < report.end_offset:
                    latencies.append(visible_ms - stored)
                    del put_ms[offset]

    config = ReputConfig(
        tables_dir=work / "latency-tables", trigger_interval_ms=1000, optimize_interval_batches=0
    )
    query, writer = start_reput(spark, store_dir, config, LEVELS, on_batch=on_batch)
    # Warm-up: one message through a first batch (JIT, first Delta snapshot loads), unmeasured.
    store.put(PutRequest("Latency", b"warm-up"))
    deadline = time.monotonic() + 120
    while writer.last_report is None and time.monotonic() < deadline:
        time.sleep(0.1)
    stop = threading.Event()

    def produce() -> None:
        index = 0
        while not stop.is_set():
            result = store.put(PutRequest("Latency", b"x" * 100, keys=(f"k{index}",)))
            with lock:
                put_ms[result.physical_offset] = result.store_timestamp_ms
            index += 1
            stop.wait(interval_ms / 1000)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    time.sleep(seconds)  # a benchmark, not a test: it measures over wall time
    stop.set()
    thread.join()
    deadline = time.monotonic() + 120
    while put_ms and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()
    store.close()
    return latencies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--segment-mib", type=int, default=64)
    parser.add_argument("--lookups", type=int, default=15)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--latency-seconds", type=float, default=30.0)
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--only-latency", action="store_true")
    parser.add_argument("--skip-lookups", action="store_true")
    parser.add_argument(
        "--file-mib", type=int, default=4, help="OPTIMIZE target file size (many files to skip)"
    )
    parser.add_argument(
        "--batch-mib",
        type=int,
        default=256,
        help="reput maxBytesPerTrigger in MiB for the throughput run (0: the whole log in one "
        "batch, which needs a driver heap several times the log's size)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work dir (store, tables)")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    # The writer's per-batch line (read ms, write ms, lag) shows where a batch's time goes.
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("rmq_spark.reput").setLevel(logging.INFO)

    work = Path(tempfile.mkdtemp(prefix="bench-reput-"))
    store = work / "store"
    started = time.perf_counter()
    end = write_store(store, args.messages, args.segment_mib << 20)
    print(
        f"wrote {args.messages:,} messages ({end / 2**20:,.0f} MiB of log) in "
        f"{time.perf_counter() - started:.1f} s; work dir {work}"
    )
    spark = build_session(
        SparkConfig(
            master=args.master,
            shuffle_partitions=2,
            log_level="ERROR",
            extra_conf=(f"spark.databricks.delta.optimize.maxFileSize={args.file_mib << 20}",),
        )
    )
    try:
        append_s = bench_delta_append(spark, work / "append-baseline")
        print(
            f"baseline: one 100-row append to a Delta table in this session, median "
            f"{append_s:.2f} s (the floor under each micro-batch's commit)"
        )
        if not args.only_latency:
            bench_throughput_and_lookups(spark, store, work, args)
        if not args.skip_latency:
            lat = sorted(bench_latency(spark, work, args.latency_seconds, args.interval_ms))
            if lat:
                p50 = lat[len(lat) // 2] / 1000
                p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] / 1000
                print(
                    f"put -> visible in rmq.consume_queue, 1 s trigger: {len(lat)} messages, "
                    f"p50 {p50:.2f} s, p99 {p99:.2f} s (targets 2 s / 5 s)"
                )
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def bench_throughput_and_lookups(spark, store: Path, work: Path, args) -> None:  # noqa: ANN001
    rows, source_s = bench_source_noop(spark, store, work / "noop-ck")
    print(f"source -> noop: {rows:,} messages in {source_s:.1f} s = {rows / source_s:,.0f}/s")
    written, reput_s, batches = bench_reput(spark, store, work / "tables", args.batch_mib << 20)
    print(
        f"reput -> 3 Delta tables: {written:,} messages in {reput_s:.1f} s "
        f"({batches} batches) = {written / reput_s:,.0f}/s; "
        f"ratio reput/source {(written / reput_s) / (rows / source_s):.2f}"
    )
    if args.skip_lookups:
        return
    started = time.perf_counter()
    optimize_tables(spark, work / "tables")
    print(f"OPTIMIZE of the three tables: {time.perf_counter() - started:.1f} s")
    bench_lookups(spark, store, work / "tables", args.messages, args.lookups)


if __name__ == "__main__":
    sys.exit(main())
