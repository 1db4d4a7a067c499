"""Benchmark: what the lag metrics and topic-aware admission control cost per trigger.

Every micro-batch of a ``rocketmq`` stream calls ``latestOffset`` then ``reportLatestOffset``
on the driver. Since issue 17 the report carries the lag of the subscribed topics (messages,
bytes, age of the oldest unread message) next to the log backlog, and with a topic filter
``maxMessagesPerTrigger`` / ``minMessagesPerTrigger`` count only subscribed messages, which
reads each header's topic. This measures, in one process on a synthetic store (the writer of
``bench_source.py``: one topic, ~270-byte records), the median milliseconds of:

* ``latestOffset`` with no limit (the trigger's look at the store: the baseline);
* ``reportLatestOffset`` as before issue 17 (backlog only: ``planner.backlog``), and as now,
  without a topic filter (+ one store timestamp) and with one (+ a topic walk of up to
  ``PROGRESS_COUNT_MAX`` headers);
* ``metrics()`` (counts up to ``BACKLOG_COUNT_MAX``), without and with a topic filter;
* ``latestOffset`` under ``maxMessagesPerTrigger`` without and with a topic filter;

for a backlog of 1,000, 20,000 and (``--messages``) all messages behind the batch end.

Usage::

    python bench/bench_source_lag.py                    # 1,000,000 messages (~1 minute)
    python bench/bench_source_lag.py --messages 200000 --repeat 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_source import write_store  # noqa: E402
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402

from rmq_spark.spark import planner  # noqa: E402
from rmq_spark.spark.offsets import offset_dict  # noqa: E402
from rmq_spark.spark.options import parse_options  # noqa: E402
from rmq_spark.spark.stream import (  # noqa: E402
    BACKLOG_COUNT_MAX,
    PROGRESS_COUNT_MAX,
    RocketMQStreamReader,
)
from rmq_spark.store.view import StoreView  # noqa: E402

TOPIC = "BenchTopic"  # the synthetic writer's only topic


def _median_ms(action: Callable[[], object], repeat: int) -> float:
    action()  # warm the page cache and the code
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _reader(store: Path, **options: str) -> RocketMQStreamReader:
    raw = {"path": str(store), "startingOffsets": "earliest", **options}
    return RocketMQStreamReader(parse_options(raw, streaming=True))


def _start_behind(store: Path, behind: int, total: int) -> dict:
    """The source offset with ``behind`` messages after it (a record start)."""
    view = StoreView.open(store)
    end = planner.readable_end(view)
    skip = max(0, total - behind)
    position = planner.advance(view, view.min_offset, end, records_max=skip) if skip else 0
    return offset_dict(position)


def measure(store: Path, behind: int, total: int, repeat: int) -> dict[str, float]:
    start = _start_behind(store, behind, total)
    plain, filtered = _reader(store), _reader(store, topics=TOPIC)

    def report_before() -> object:  # issue 16's report: the log backlog only
        view, end = plain._look()
        first = min(max(start["physical_offset"], view.min_offset), end)
        return planner.backlog(view, first, end, PROGRESS_COUNT_MAX)

    def report_now(reader: RocketMQStreamReader) -> Callable[[], object]:
        def run() -> object:
            reader.latestOffset(start, ReadAllAvailable())
            reader._planned_end = start["physical_offset"]  # the report is behind `start`
            return reader.reportLatestOffset()

        return run

    limited, limited_filtered = _reader(store), _reader(store, topics=TOPIC)
    budget = ReadMaxRows(min(behind, 100_000))
    return {
        "latestOffset (no limit)": _median_ms(
            lambda: plain.latestOffset(start, ReadAllAvailable()), repeat
        ),
        "report, backlog only (before)": _median_ms(report_before, repeat),
        "latestOffset + report, no filter": _median_ms(report_now(plain), repeat),
        "latestOffset + report, topics filter": _median_ms(report_now(filtered), repeat),
        f"metrics() (<= {BACKLOG_COUNT_MAX:,}), no filter": _median_ms(
            lambda: plain.metrics(start), repeat
        ),
        "metrics(), topics filter": _median_ms(lambda: filtered.metrics(start), repeat),
        "latestOffset maxMessages (<= 100k), no filter": _median_ms(
            lambda: limited.latestOffset(start, budget), repeat
        ),
        "latestOffset maxMessages, topics filter": _median_ms(
            lambda: limited_filtered.latestOffset(start, budget), repeat
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--segment-mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--keep", type=Path, default=None, help="store dir to create or reuse")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-lag-"))
    store = args.keep or work / "store"
    try:
        if not (store / "commitlog").is_dir():
            write_store(store, args.messages, args.segment_mib << 20)
        backlogs = sorted({min(b, args.messages) for b in (1_000, 20_000, args.messages)})
        results = {
            behind: measure(store, behind, args.messages, args.repeat) for behind in backlogs
        }
        names = list(next(iter(results.values())))
        print(f"per-trigger driver cost, ms (median of {args.repeat}); backlog in messages")
        print(f"| {'call':48} | " + " | ".join(f"{b:>10,}" for b in backlogs) + " |")
        print(f"|{'-' * 50}|" + "|".join("-" * 12 for _ in backlogs) + "|")
        for name in names:
            cells = " | ".join(f"{results[b][name]:10.2f}" for b in backlogs)
            print(f"| {name:48} | {cells} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
