"""Benchmark: what the broker's ConsumeQueue dispatch costs (store/cq_dispatch.py, cq_facts.py).

Cases, 100 B bodies, TAGS on every message, 4 queues (round robin), in one run:
* ASYNC single-thread ``put``, ``put_batch(256)`` and ``put_columns(256)`` with
  ``store.consume_queue`` off, then on (single puts dispatched by the dispatch thread beside
  the producer on the same interpreter, batches of 128+ by the producer itself after each
  batch): msgs/s per wall and per CPU second, the on/off ratio, and the time until the last
  put is dispatched (``bench_cq_cpu.py`` splits the CPU by thread);
* dispatch alone over a store of N records: the recovery scan (``collect_units``: the scan,
  no CRC, no body, plus tagsCodes) and ``ConsumeQueues.place``: microseconds of CPU per
  message for each step;
* with ``--rebuild-mb M``: a store of M MB written with the queue off, then opened with it on
  (a store written before the ConsumeQueue existed: every queue rebuilt from the whole
  CommitLog), timed, with the rebuild's progress log lines.

Usage: python bench/bench_cq_dispatch.py [--messages N] [--dir DIR] [--rebuild-mb M]
Default: 100 000 messages (well under a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.consume_queues import ConsumeQueues
from rmq_spark.store.cq_dispatch import collect_units
from rmq_spark.store.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_message_delay_level
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

BATCH = 256
QUEUES = 4
TOPIC = "BenchTopic"
BODY = b"x" * 100


def _config(root: Path, consume_queue: bool, message_index: bool = False) -> StoreConfig:
    """The ConsumeQueue alone unless ``message_index`` (``bench_cq_cpu.py --index``)."""
    return StoreConfig(
        root_dir=root,
        segment_size_bytes=256 << 20,
        flush_policy=FlushPolicy.ASYNC,
        consume_queue=consume_queue,
        message_index=message_index,
    )


def _single(store: MessageStore, count: int) -> None:
    requests = [PutRequest(TOPIC, BODY, queue_id=i % QUEUES, tags="TagA") for i in range(count)]
    put = store.put
    for request in requests:
        put(request)


def _batch(store: MessageStore, count: int) -> None:
    batch = [PutRequest(TOPIC, BODY, queue_id=i % QUEUES, tags="TagA") for i in range(BATCH)]
    for _ in range(count // BATCH):
        store.put_batch(batch)


def _columns(store: MessageStore, count: int) -> None:
    bodies, queue_ids = [BODY] * BATCH, [i % QUEUES for i in range(BATCH)]
    for _ in range(count // BATCH):
        store.put_columns(TOPIC, bodies, queue_ids, tags="TagA")


CASES: dict[str, Callable[[MessageStore, int], None]] = {
    "put": _single,
    f"put_batch({BATCH})": _batch,
    f"put_columns({BATCH})": _columns,
}


def _run(root: Path, case: str, count: int, consume_queue: bool) -> float:
    """One case into a fresh store: msgs/s by wall clock (printed with the CPU rate)."""
    store = MessageStore.open(_config(root, consume_queue))
    try:
        count = count // BATCH * BATCH
        wall, cpu = time.perf_counter(), time.process_time()
        CASES[case](store, count)
        put_wall, put_cpu = time.perf_counter() - wall, time.process_time() - cpu
        lag = ""
        if consume_queue:
            assert store.consume_queues.wait_dispatched(store.max_offset, 60)
            lag = f"   last unit {(time.perf_counter() - wall - put_wall) * 1000:.1f} ms after"
        print(
            f"{case:18} consume_queue={'on ' if consume_queue else 'off'}: "
            f"{count / put_wall:10,.0f} msgs/s wall {count / put_cpu:10,.0f} msgs/s cpu{lag}"
        )
        return count / put_wall
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)


def _dispatch_alone(root: Path, count: int) -> None:
    """The recovery path's costs over ``count`` records: scan + tagsCodes, then place."""
    store = MessageStore.open(_config(root, False))
    try:
        _columns(store, count)
        end = store.max_offset
        levels = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)
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
            f"recovery scan alone, {count:,} records: scan + tagsCode "
            f"{scan_cpu / count * 1e6:.2f} us/msg, place {place_cpu / count * 1e6:.2f} us/msg"
        )
    finally:
        store.close()


def _rebuild(root: Path, megabytes: int) -> None:
    """A store of ``megabytes`` written without the queue, then opened with it."""
    store = MessageStore.open(_config(root, False))
    try:
        while store.max_offset < megabytes << 20:
            _columns(store, 64 * BATCH)
        size, records = store.max_offset, sum(store.queue_offsets().values())
    finally:
        store.close()
    logging.basicConfig(level=logging.INFO, format="  %(asctime)s %(name)s: %(message)s")
    logging.getLogger("rmq_spark.store.cq_dispatch").setLevel(logging.INFO)
    logging.getLogger("rmq_spark.store.cq_recovery").setLevel(logging.INFO)
    wall, cpu = time.perf_counter(), time.process_time()
    store = MessageStore.open(_config(root, True))
    open_wall, open_cpu = time.perf_counter() - wall, time.process_time() - cpu
    store.close()
    print(
        f"first open with the queue of a {size / (1 << 20):,.0f} MB store ({records:,} records): "
        f"{open_wall:.1f} s wall, {open_cpu:.1f} s CPU ({size / (1 << 20) / open_wall:.0f} MB/s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--rebuild-mb", type=int, default=0)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-cq-"))
    print(f"load average {os.getloadavg()[0]:.2f}")
    try:
        for case in CASES:
            off = _run(base / "off", case, args.messages, consume_queue=False)
            on = _run(base / "on", case, args.messages, consume_queue=True)
            print(f"{case:18} on/off {on / off:.2f}")
        _dispatch_alone(base / "alone", args.messages)
        if args.rebuild_mb:
            _rebuild(base / "rebuild", args.rebuild_mb)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
