"""Benchmark: what the broker's ConsumeQueue dispatch costs (store/cq_dispatch.py).

Cases, 100 B bodies, TAGS on every message, 4 queues, in one run:
* dispatch alone: ``collect_units`` (the scan, no CRC, no body, plus tagsCodes) and
  ``ConsumeQueues.place`` (the pwrites) over a store of N records: microseconds of CPU per
  message for each step;
* ASYNC single-thread ``put`` with ``store.consume_queue`` off, then on (the dispatch thread
  running beside the producer on the same interpreter): msgs/s per wall and per CPU second,
  and the time until the last put is dispatched.

Usage: python bench/bench_cq_dispatch.py [--messages N] [--dir DIR]
Default: 100 000 messages (well under a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.consume_queues import ConsumeQueues
from rmq_spark.store.cq_dispatch import collect_units
from rmq_spark.store.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_message_delay_level
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest


def _requests(count: int) -> list[PutRequest]:
    body = b"x" * 100
    return [PutRequest("BenchTopic", body, queue_id=i % 4, tags="TagA") for i in range(count)]


def _put_all(root: Path, requests: list[PutRequest], consume_queue: bool) -> None:
    config = StoreConfig(
        root_dir=root,
        segment_size_bytes=256 << 20,
        flush_policy=FlushPolicy.ASYNC,
        consume_queue=consume_queue,
    )
    store = MessageStore.open(config)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        for request in requests:
            store.put(request)
        put_wall, put_cpu = time.perf_counter() - wall, time.process_time() - cpu
        lag = 0.0
        if consume_queue:
            assert store.consume_queues.wait_dispatched(store.max_offset, 60)
            lag = time.perf_counter() - wall - put_wall
        count = len(requests)
        print(
            f"put, consume_queue={'on ' if consume_queue else 'off'}: "
            f"{count / put_wall:10,.0f} msgs/s wall {count / put_cpu:10,.0f} msgs/s cpu"
            + (f"   last unit {lag * 1000:.1f} ms after the last put" if consume_queue else "")
        )
    finally:
        store.close()


def _dispatch_alone(root: Path) -> None:
    levels = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)
    config = StoreConfig(root_dir=root, segment_size_bytes=256 << 20, consume_queue=False)
    store = MessageStore.open(config)
    try:
        end = store.max_offset
        cpu = time.process_time()
        collected = collect_units(store.commitlog.segments, 0, end, levels)
        scan_cpu = time.process_time() - cpu
        count = sum(len(entries) for entries in collected.batch.values())
        queues = ConsumeQueues(root / "bench-cq", 300_000)
        cpu = time.process_time()
        queues.place(collected.batch, fill_gaps=False)
        place_cpu = time.process_time() - cpu
        queues.close()
        print(
            f"dispatch alone, {count:,} records: scan + tagsCode {scan_cpu / count * 1e6:.2f} "
            f"us/msg, place {place_cpu / count * 1e6:.2f} us/msg"
        )
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-cq-"))
    try:
        requests = _requests(args.messages)
        _put_all(base / "off", requests, consume_queue=False)
        _put_all(base / "on", requests, consume_queue=True)
        _dispatch_alone(base / "off")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
