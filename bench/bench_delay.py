"""Benchmark: delay redelivery throughput and lateness for N messages due in the same second.

Puts N delay-level messages (level 1 = ``--delay-s`` s, put in batches of 10,000, so their
due times fall within about one second) -- or with ``--kind timer``, N timer messages all due
at the same instant -- into a temp store, then runs the redelivery job in-process (embedded
store sink, CommitLog entry source, continuous with ``--trigger-ms``) until all are in the
real topic. The job starts right after the puts, a few seconds before the messages fall due,
as a continuously running job would be: it reads them ahead (``delay.lookahead_ms``) and puts
them when due. Reports redelivery messages/s (over the time the passes were busy) and
lateness p50/p99/max (real-topic store time minus due time; target p99 <= 1 s + trigger
interval).

Baseline, measured in the same run: putting the same N restored records (same topic, body,
properties) straight into a fresh store with ``put_batch`` in batches of ``--batch``; the
table shows redelivery/baseline msgs/s as a ratio (the cost of reading, restoring and
journaling on top of the puts).

Usage: python bench/bench_delay.py [--messages N] [--kind level|timer] [--trigger-ms MS]
                                   [--batch N] [--flush SYNC|ASYNC] [--source commitlog|table]
                                   [--delay-s S] [--json]
Default: 20,000 messages, entries from the CommitLog (seconds); --messages 100000 for the
full run; --source table indexes the schedule records with the reput job first and reads
due entries from the consume_queue Delta table, as production does (minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rmq_spark.broker.embedded import Broker  # noqa: E402
from rmq_spark.clock import SystemClock  # noqa: E402
from rmq_spark.delay.config import DelayConfig, EntrySourceKind  # noqa: E402
from rmq_spark.delay.job import open_redeliverer, run_continuous  # noqa: E402
from rmq_spark.delay.redeliver import PassReport  # noqa: E402
from rmq_spark.delay.schedule import percentile  # noqa: E402
from rmq_spark.delay.sink import StoreSink  # noqa: E402
from rmq_spark.store.config import FlushPolicy, StoreConfig  # noqa: E402
from rmq_spark.store.delay_levels import parse_message_delay_level  # noqa: E402
from rmq_spark.store.layout import RMQ_SYS_WHEEL_TIMER_TOPIC  # noqa: E402
from rmq_spark.store.properties import encode_properties  # noqa: E402
from rmq_spark.store.put import PutRequest  # noqa: E402

LEVELS = "1s 5s 10s"  # --delay-s replaces level 1
PUT_CHUNK = 10_000
TOPIC = "bench_orders"
DEADLINE_S = 600.0


def levels(delay_s: int) -> str:
    return f"{delay_s}s" + LEVELS.removeprefix("1s")


def store_config(root: Path, flush: str, delay_s: int = 1) -> StoreConfig:
    return StoreConfig(
        root_dir=root,
        segment_size_bytes=256 << 20,
        flush_policy=FlushPolicy(flush),
        message_delay_level=levels(delay_s),
    )


def schedule_requests(count: int, body: bytes, kind: str, due_ms: int) -> list[PutRequest]:
    if kind == "level":
        return [
            PutRequest(
                topic=TOPIC,
                queue_id=i % 8,
                body=body,
                properties={"DELAY": "1", "UNIQ_KEY": f"B{i:08d}", "TAGS": "bench"},
            )
            for i in range(count)
        ]
    return [
        PutRequest(
            topic=RMQ_SYS_WHEEL_TIMER_TOPIC,
            body=body,
            raw_properties=encode_properties(
                {
                    "UNIQ_KEY": f"B{i:08d}",
                    "TAGS": "bench",
                    "TIMER_DELIVER_MS": str(due_ms),
                    "TIMER_OUT_MS": str(due_ms),
                    "REAL_TOPIC": TOPIC,
                    "REAL_QID": str(i % 8),
                }
            ),
        )
        for i in range(count)
    ]


def run_redelivery(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    root = work / "store"
    clock = SystemClock()
    body = b"x" * args.body_bytes
    config_store = store_config(root, args.flush, args.delay_s)
    with Broker(root, store_config=config_store, clock=clock) as broker:
        due_ms = clock.now_ms() + args.delay_s * 1000
        requests = schedule_requests(args.messages, body, args.kind, due_ms)
        put_started = time.monotonic()
        for start in range(0, len(requests), PUT_CHUNK):
            results = broker.store.put_batch(requests[start : start + PUT_CHUNK])
            assert all(r.ok for r in results), results[0]
        put_s = time.monotonic() - put_started
        spark, tables = None, None
        if args.source == "table":
            spark, tables = build_tables(broker, root, work, args)
        config = DelayConfig(
            batch_messages_max=args.batch,
            pass_messages_max=max(args.batch, args.messages),
            trigger_interval_ms=args.trigger_ms,
            **({} if args.lookahead_ms is None else {"lookahead_ms": args.lookahead_ms}),
            entry_source=(
                EntrySourceKind.CONSUME_QUEUE if spark is not None else EntrySourceKind.COMMITLOG
            ),
        )
        redeliverer = open_redeliverer(
            root,
            StoreSink(broker),
            config=config,
            delay_levels_ms=parse_message_delay_level(levels(args.delay_s)),
            clock=clock,
            spark=spark,
            tables_dir=tables,
        )
        busy_s: list[float] = []
        original = redeliverer.run_pass

        def timed_pass() -> PassReport:
            started = time.monotonic()
            report = original()
            if report.delivered:
                busy_s.append(time.monotonic() - started)
            return report

        redeliverer.run_pass = timed_pass  # type: ignore[method-assign]
        stop = threading.Event()
        delivered = 0
        lateness: list[int] = []
        early = 0

        def on_pass(report: PassReport) -> None:
            nonlocal delivered, early
            delivered += report.delivered
            early += report.early
            lateness.extend(report.lateness_ms)
            if delivered >= args.messages:
                stop.set()

        wall_started = time.monotonic()
        timer = threading.Timer(DEADLINE_S, stop.set)
        timer.start()
        try:
            run_continuous(
                redeliverer, trigger_interval_ms=args.trigger_ms, stop=stop, on_pass=on_pass
            )
        finally:
            timer.cancel()
            redeliverer.close()
        wall_s = time.monotonic() - wall_started
    if delivered < args.messages:
        raise SystemExit(f"only {delivered} of {args.messages} delivered in {DEADLINE_S} s")
    busy = sum(busy_s)
    return {
        "messages": args.messages,
        "schedule_put_s": round(put_s, 2),
        "redelivery_busy_s": round(busy, 2),
        "redelivery_wall_s": round(wall_s, 2),
        "redelivery_msgs_per_s": round(args.messages / busy),
        "lateness_p50_ms": percentile(lateness, 0.5),
        "lateness_p99_ms": percentile(lateness, 0.99),
        "lateness_max_ms": max(lateness),
        "early": early,
        "passes_delivering": len(busy_s),
    }


def build_tables(broker: Any, root: Path, work: Path, args: argparse.Namespace) -> Any:
    """Index the schedule records into consume_queue with the reput job (--source table)."""
    from rmq_spark.spark.config import SparkConfig
    from rmq_spark.spark.reput import run_reput
    from rmq_spark.spark.reput_config import ReputConfig
    from rmq_spark.spark.session import build_session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = build_session(SparkConfig(master="local[2]", shuffle_partitions=2, log_level="ERROR"))
    broker.store.flush()
    tables = work / "tables"
    started = time.monotonic()
    config = ReputConfig(tables_dir=tables, available_now=True, database="bench_delay")
    run_reput(spark, root, config, parse_message_delay_level(levels(args.delay_s)))
    print(f"reput indexed the schedule records in {time.monotonic() - started:.1f} s")
    return spark, tables


def run_baseline(args: argparse.Namespace, work: Path) -> float:
    """msgs/s of put_batch for the same restored records into a fresh store."""
    root = work / "baseline"
    body = b"x" * args.body_bytes
    requests = [
        PutRequest(
            topic=TOPIC,
            queue_id=i % 8,
            body=body,
            raw_properties=encode_properties(
                {"DELAY": "1", "UNIQ_KEY": f"B{i:08d}", "TAGS": "bench", "REAL_TOPIC": TOPIC}
            )
            + encode_properties({"REAL_QID": str(i % 8)}),
        )
        for i in range(args.messages)
    ]
    with Broker(root, store_config=store_config(root, args.flush)) as broker:
        started = time.monotonic()
        for start in range(0, len(requests), args.batch):
            results = broker.store.put_batch(requests[start : start + args.batch])
            assert all(r.ok for r in results)
        return args.messages / (time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--kind", choices=("level", "timer"), default="level")
    parser.add_argument("--trigger-ms", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=2000, help="delay.batch_messages_max")
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--flush", choices=("SYNC", "ASYNC"), default="ASYNC")
    parser.add_argument(
        "--source",
        choices=("commitlog", "table"),
        default="commitlog",
        help="where due entries come from; table runs the reput job first (needs Spark)",
    )
    parser.add_argument(
        "--delay-s",
        type=int,
        default=None,
        help="delay of level 1 / timer delay in seconds (default 6: the job starts before "
        "they fall due; 90 with --source table, so that the reput job finishes first)",
    )
    parser.add_argument(
        "--lookahead-ms", type=int, default=None, help="delay.lookahead_ms (0: off)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.delay_s is None:
        args.delay_s = 90 if args.source == "table" else 6
    with tempfile.TemporaryDirectory(prefix="bench-delay-") as tmp:
        work = Path(tmp)
        result = run_redelivery(args, work)
        baseline = run_baseline(args, work)
    result["baseline_put_msgs_per_s"] = round(baseline)
    result["ratio_vs_baseline"] = round(result["redelivery_msgs_per_s"] / baseline, 3)
    target_ms = 1000 + args.trigger_ms
    result["p99_target_ms"] = target_ms
    result["p99_within_target"] = (result["lateness_p99_ms"] or 0) <= target_ms
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"delay redelivery: {args.messages} {args.kind} messages due within one second, "
        f"{args.body_bytes} B bodies, flush {args.flush}, trigger {args.trigger_ms} ms, "
        f"batch {args.batch}, entries from {args.source}, due {args.delay_s} s after the put, "
        f"lookahead {'default' if args.lookahead_ms is None else args.lookahead_ms} ms"
    )
    print(f"{'case':<34}{'msgs/s':>10}{'ratio':>8}")
    print(f"{'baseline: put_batch of the copies':<34}{result['baseline_put_msgs_per_s']:>10}{1:>8}")
    print(
        f"{'redelivery (busy time)':<34}{result['redelivery_msgs_per_s']:>10}"
        f"{result['ratio_vs_baseline']:>8}"
    )
    print(
        f"lateness p50 {result['lateness_p50_ms']:.0f} ms, p99 {result['lateness_p99_ms']:.0f} ms, "
        f"max {result['lateness_max_ms']} ms (target p99 <= {target_ms} ms: "
        f"{'met' if result['p99_within_target'] else 'NOT met'}); early: {result['early']}; "
        f"{result['passes_delivering']} passes delivered, wall {result['redelivery_wall_s']} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
