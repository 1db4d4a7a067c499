"""Benchmark: embedded ``MessageStore`` puts, with their baselines measured in the same run.

Baselines: the disk's own sequential write rate (dd-like: 1 MiB ``os.write`` calls, one
fsync at the end) and the yardstick, the fastest pure-Python encoder of the same records we
could write (``put_yardstick.Yardstick``: same bytes, record CRC sealed, offsets and UNIQ_KEYs
assigned, in batches of 256, with no validation, results or window; checked against
``codec.encode_record`` before it is timed): the ceiling for any Python put path.

Cases:
* ASYNC, 100 B and 1 KiB bodies: single ``put`` and ``put_batch`` (batches of 256), for both
  segment I/O modes (MMAP and PWRITE), and the columnar ``put_columns`` / ``put_arrow``
  (batches of 256, MMAP): msgs/s, MB/s of records, ratio to the yardstick and to the disk
  rate.
* ``--profile``: the per-message cost of each step of ``put_batch`` (100 B, MMAP, record
  CRC), each run alone on the same batches (``put_yardstick.profile_put_batch``).
* Producer threads, 100 B bodies, each case bounded in time: ASYNC with 64 threads, and SYNC
  group commit with 1/8/64 threads: msgs/s (wall and CPU), p50/p99 put latency, fsyncs and
  messages per fsync, ratio to the ASYNC single-put rate of the same run (wall and CPU).
* asyncio producers (coroutines on one event loop, ``await store.put_async``; what the gRPC
  broker's handlers are), same bounds and columns, on asyncio's own loop and on uvloop (the
  a broker option, ``broker.event_loop``): ASYNC with 64 coroutines that never yield (an ASYNC put
  never suspends, so they run one at a time), ASYNC with 64 coroutines that yield to the loop
  after every put (64 producers that interleave, as the SYNC ones do), SYNC with 1/8/64
  (64 only on uvloop), and SYNC 64 with segment warming off. Both ASYNC cases are baselines
  of the SYNC ratios, each on the same loop.

Columns "msgs/s" are per elapsed (wall) second; "cpu" rates divide by this process's CPU time
(``time.process_time``: user + system, all threads, including the kernel's fsync work), which
is what the code costs when the machine is shared and what the put-path targets are measured
by. Requests are built (and ``gc.freeze()``-d) before
timing; results are discarded. Segments are 1 GiB, preallocated (fallocate) like RocketMQ's.

Usage: python bench/bench_put.py [--messages N] [--sync-seconds S] [--dir DIR] [--quick]
    [--only-producers | --only-batch] [--profile]
Default: 200 000 messages per ASYNC case, 4 s per producer case (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from put_yardstick import Yardstick, profile_put_batch  # noqa: E402

from rmq_spark.eventloop import new_event_loop, uvloop_available  # noqa: E402
from rmq_spark.store.async_commit import AsyncGroupCommit  # noqa: E402
from rmq_spark.store.config import FlushPolicy, IoMode, StoreConfig  # noqa: E402
from rmq_spark.store.message import HostAddress  # noqa: E402
from rmq_spark.store.message_store import MessageStore  # noqa: E402
from rmq_spark.store.put import PutRequest  # noqa: E402

BODY_SIZES = (100, 1024)
BATCH_SIZE = 256
THREAD_COUNTS = (1, 8, 64)
TOPIC = "BenchTopic"
MB = 1_000_000


class Timer:
    """Wall and CPU time of a block."""

    def __enter__(self) -> Timer:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def disk_write_rate(directory: Path, total_bytes: int) -> float:
    """Sequential write MB/s: 1 MiB writes, then fsync (what dd with conv=fsync measures)."""
    path = directory / "dd.bin"
    chunk = os.urandom(1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        written = 0
        while written < total_bytes:
            written += os.write(fd, chunk)
        os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()
    return written / elapsed / MB


def encode_rate(body_size: int, count: int) -> tuple[float, float, float]:
    """(msgs/s wall, msgs/s cpu, record MB/s) of the yardstick, batches of ``BATCH_SIZE``."""
    host = HostAddress("127.0.0.1", 10911)
    yardstick = Yardstick(TOPIC, body_size, host, "7F00000100002A9F1234ABCD0001")
    yardstick.check()
    bodies = [b"x" * body_size for _ in range(count)]
    queue_ids = [index & 3 for index in range(count)]
    queue_offsets: dict[int, int] = {}
    size = 0
    gc.collect()
    gc.freeze()
    with Timer() as timer:
        encode = yardstick.encode
        for index in range(0, count, BATCH_SIZE):
            now = time.time_ns() // 1_000_000
            end = index + BATCH_SIZE
            size += len(encode(bodies[index:end], queue_ids[index:end], size, now, queue_offsets))
    gc.unfreeze()
    return count / timer.wall, count / timer.cpu, size / timer.wall / MB


def columns_case(root: Path, body_size: int, count: int, arrow: bool) -> tuple[float, float, float]:
    """(msgs/s wall, msgs/s cpu, MB/s) of ASYNC ``put_columns`` (or ``put_arrow`` of Arrow
    record batches), batches of ``BATCH_SIZE``, MMAP, record CRC on."""
    import pyarrow as pa

    shutil.rmtree(root, ignore_errors=True)
    store = MessageStore.open(_config(root, FlushPolicy.ASYNC, IoMode.MMAP))
    try:
        batches = []
        for index in range(0, count, BATCH_SIZE):
            n = min(BATCH_SIZE, count - index)
            bodies = [b"x" * body_size for _ in range(n)]
            queue_ids = [(index + i) & 3 for i in range(n)]
            if arrow:
                batches.append(
                    pa.record_batch(
                        {"topic": pa.array([TOPIC] * n), "body": pa.array(bodies, pa.binary()),
                         "queue_id": pa.array(queue_ids, pa.int32())}
                    )
                )  # fmt: skip
            else:
                batches.append((bodies, queue_ids))
        gc.collect()
        gc.freeze()
        start_offset = store.max_offset
        with Timer() as timer:
            if arrow:
                put_arrow = store.put_arrow
                for batch in batches:
                    put_arrow(batch)
            else:
                put_columns = store.put_columns
                for bodies, queue_ids in batches:
                    put_columns(TOPIC, bodies, queue_ids)
        written = store.max_offset - start_offset
        gc.unfreeze()
    finally:
        store.close()
    return count / timer.wall, count / timer.cpu, written / timer.wall / MB


def _config(
    root: Path, policy: FlushPolicy, io_mode: IoMode, warm: bool = True, record_crc: bool = True
) -> StoreConfig:
    defaults = StoreConfig()
    return StoreConfig(
        root_dir=root,
        flush_policy=policy,
        io_mode=io_mode,
        clean_resource_interval_ms=0,
        idempotency_window_messages=100_000,
        warm_ahead_bytes=defaults.warm_ahead_bytes if warm else 0,
        append_record_crc=record_crc,
    )


def async_case(
    root: Path, io_mode: IoMode, body_size: int, count: int, batch: bool, record_crc: bool = True
) -> tuple[float, float, float]:
    """(msgs/s wall, msgs/s cpu, MB/s) of ASYNC puts."""
    shutil.rmtree(root, ignore_errors=True)
    store = MessageStore.open(_config(root, FlushPolicy.ASYNC, io_mode, record_crc=record_crc))
    try:
        requests = [PutRequest(TOPIC, b"x" * body_size, queue_id=i & 3) for i in range(count)]
        gc.collect()
        gc.freeze()
        start_offset = store.max_offset
        with Timer() as timer:
            if batch:
                put_batch = store.put_batch
                for index in range(0, count, BATCH_SIZE):
                    put_batch(requests[index : index + BATCH_SIZE])
            else:
                put = store.put
                for request in requests:
                    put(request)
        written = store.max_offset - start_offset
        gc.unfreeze()
    finally:
        store.close()
    return count / timer.wall, count / timer.cpu, written / timer.wall / MB


def threaded_case(
    root: Path, policy: FlushPolicy, threads: int, seconds: float
) -> tuple[float, float, float, float, int, int]:
    """(msgs/s wall, msgs/s cpu, p50 ms, p99 ms, fsyncs, messages) of puts from ``threads``
    producers during ``seconds``."""
    shutil.rmtree(root, ignore_errors=True)
    store = MessageStore.open(_config(root, policy, IoMode.MMAP))
    latencies: list[list[float]] = [[] for _ in range(threads)]
    stop = threading.Event()
    failures = []

    def producer(index: int) -> None:
        request = PutRequest(TOPIC, b"x" * 100, queue_id=index & 3)
        own = latencies[index]
        clock = time.perf_counter
        put = store.put
        while not stop.is_set():
            start = clock()
            result = put(request)
            own.append(clock() - start)
            if not result.ok:
                failures.append(result)
                return

    workers = [threading.Thread(target=producer, args=(i,)) for i in range(threads)]
    try:
        fsyncs_before = store._durability.group.fsync_count  # noqa: SLF001 - bench introspection
        with Timer() as timer:
            for worker in workers:
                worker.start()
            time.sleep(seconds)
            stop.set()
            for worker in workers:
                worker.join()
        fsyncs = store._durability.group.fsync_count - fsyncs_before  # noqa: SLF001
    finally:
        store.close()
    if failures:
        raise SystemExit(f"{policy.name} put failed: {failures[0]}")
    merged = sorted(value for own in latencies for value in own)
    p50 = statistics.median(merged) * 1000
    p99 = merged[min(len(merged) - 1, int(len(merged) * 0.99))] * 1000
    count = len(merged)
    return count / timer.wall, count / timer.cpu, p50, p99, fsyncs, count


def asyncio_case(
    root: Path,
    policy: FlushPolicy,
    producers: int,
    seconds: float,
    *,
    yield_each: bool = False,
    wave_size: int | None = None,
    warm: bool = True,
    loop: str = "asyncio",
) -> tuple[float, float, float, float, int, int, int]:
    """(msgs/s wall, msgs/s cpu, p50 ms, p99 ms, fsyncs, messages, loop wake-ups) of
    ``put_async`` from ``producers`` coroutines on one loop during ``seconds``; ``wave_size``
    overrides the store's (``async_commit.WAVE_SIZE``); ``warm``: segment warming
    (``store.warm_ahead_bytes``) on, else off; ``loop``: the event loop (``eventloop.py``)."""
    shutil.rmtree(root, ignore_errors=True)
    store = MessageStore.open(_config(root, policy, IoMode.MMAP, warm))
    if wave_size is not None:  # bench introspection: the same store, another wave size
        durability = store._durability  # noqa: SLF001
        assert durability is not None
        durability._async_commit = AsyncGroupCommit(  # noqa: SLF001
            durability.group,
            store.config.sync_flush_timeout_ms,
            wave_size,
            ring=durability._new_ring if store.config.io_uring else None,  # noqa: SLF001
        )
    latencies: list[list[float]] = [[] for _ in range(producers)]
    failures = []

    async def producer(index: int, deadline: float) -> None:
        request = PutRequest(TOPIC, b"x" * 100, queue_id=index & 3)
        own = latencies[index]
        clock = time.perf_counter
        put_async = store.put_async
        while True:
            start = clock()
            if start >= deadline:
                return
            result = await put_async(request)
            own.append(clock() - start)
            if not result.ok:
                failures.append(result)
                return
            if yield_each:
                await asyncio.sleep(0)

    async def run() -> None:
        deadline = time.perf_counter() + seconds
        await asyncio.gather(*(producer(index, deadline) for index in range(producers)))

    try:
        fsyncs_before = store._durability.group.fsync_count  # noqa: SLF001 - bench introspection
        with Timer() as timer, asyncio.Runner(loop_factory=lambda: new_event_loop(loop)) as runner:
            runner.run(run())
        fsyncs = store._durability.group.fsync_count - fsyncs_before  # noqa: SLF001
        commit = store._durability._async_commit  # noqa: SLF001
        wakeups = commit.groups if commit is not None else 0
    finally:
        store.close()
    if failures:
        raise SystemExit(f"{policy.name} put_async failed: {failures[0]}")
    merged = sorted(value for own in latencies for value in own)
    p50 = statistics.median(merged) * 1000
    p99 = merged[min(len(merged) - 1, int(len(merged) * 0.99))] * 1000
    count = len(merged)
    return count / timer.wall, count / timer.cpu, p50, p99, fsyncs, count, wakeups


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(cell.rjust(width) for cell, width in zip(cells, widths, strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000, help="messages per ASYNC case")
    parser.add_argument("--sync-seconds", type=float, default=4.0, help="seconds per SYNC case")
    parser.add_argument("--disk-mb", type=int, default=512, help="MB written by the dd baseline")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the stores")
    parser.add_argument("--quick", action="store_true", help="20 000 messages, 1 s SYNC cases")
    parser.add_argument(
        "--only-producers",
        action="store_true",
        help="only the single-put baseline and the producer (thread and asyncio) cases",
    )
    parser.add_argument(
        "--only-batch",
        action="store_true",
        help="only the 100 B yardstick, put_batch (MMAP, record CRC) and columnar cases",
    )
    parser.add_argument(
        "--profile", action="store_true", help="the per-message cost of each put_batch step"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.sync_seconds, args.disk_mb = 20_000, 1.0, 128
    base = Path(tempfile.mkdtemp(prefix="bench-put-", dir=args.dir))
    emit: Callable[[str], None] = print
    try:
        disk = disk_write_rate(base, args.disk_mb * MB)
        emit(
            f"# bench_put: {args.messages} msgs per ASYNC case, "
            f"{args.sync_seconds:g} s per SYNC case"
        )
        emit(f"disk sequential write (1 MiB writes + fsync): {disk:,.0f} MB/s\n")
        widths = [6, 19, 9, 11, 11, 8, 9, 9]
        emit(
            _row(
                ["body", "case", "io", "msgs/s", "cpu msgs/s", "MB/s", "vs yard", "vs disk"], widths
            )
        )
        async_single_100 = (0.0, 0.0)  # (msgs/s wall, msgs/s cpu)
        only = args.only_producers
        batch_only = args.only_batch
        for body_size in (100,) if only or batch_only else BODY_SIZES:
            enc_wall, enc_cpu, enc_mb = encode_rate(body_size, args.messages)
            emit(_row([str(body_size), "yardstick", "-", f"{enc_wall:,.0f}", f"{enc_cpu:,.0f}",
                       f"{enc_mb:,.0f}", "1.00", f"{enc_mb / disk:.2f}"], widths))  # fmt: skip
            # "-crc": the same without the record CRC property (store.append_record_crc), to
            # show what writing it costs.
            variants = [(IoMode.MMAP, False, True)]
            if batch_only:
                variants = [(IoMode.MMAP, True, True)]
            elif not only:
                variants = [
                    (io_mode, batch, crc)
                    for io_mode in (IoMode.MMAP, IoMode.PWRITE)
                    for batch in (False, True)
                    for crc in ((True, False) if io_mode is IoMode.MMAP else (True,))
                ]
            rows = []
            for io_mode, batch, crc in variants:
                wall, cpu, mb = async_case(
                    base / "async", io_mode, body_size, args.messages, batch, crc
                )
                if body_size == 100 and io_mode is IoMode.MMAP and not batch and crc:
                    async_single_100 = (wall, cpu)
                case = (f"put_batch({BATCH_SIZE})" if batch else "put") + ("" if crc else " -crc")
                rows.append((case, io_mode.name, wall, cpu, mb))
            if not only:
                for arrow in (False, True):
                    wall, cpu, mb = columns_case(base / "columns", body_size, args.messages, arrow)
                    case = f"put_{'arrow' if arrow else 'columns'}({BATCH_SIZE})"
                    rows.append((case, "MMAP", wall, cpu, mb))
            for case, io_name, wall, cpu, mb in rows:
                emit(_row([str(body_size), case, io_name, f"{wall:,.0f}", f"{cpu:,.0f}",
                           f"{mb:,.0f}", f"{wall / enc_wall:.2f}", f"{mb / disk:.2f}"],
                          widths))  # fmt: skip
        if args.profile:
            emit("")
            emit(f"put_batch({BATCH_SIZE}) steps, 100 B, MMAP, record CRC: ns per message")
            root = base / "profile"
            steps = profile_put_batch(
                lambda: MessageStore.open(_config(root, FlushPolicy.ASYNC, IoMode.MMAP)),
                root,
                args.messages,
                BATCH_SIZE,
            )
            for name, ns in steps:
                emit(f"  {name:<52} {ns:8.0f}")
        if batch_only:
            return 0
        emit("")
        emit(
            "Producer threads, 100 B bodies, MMAP; SYNC is group commit. Ratios: vs ASYNC single "
            "put (100 B, MMAP) of this run, by wall and by CPU time"
        )
        widths = [6, 9, 10, 11, 8, 8, 8, 10, 9, 9]
        emit(_row(["policy", "producers", "msgs/s", "cpu msgs/s", "p50 ms", "p99 ms", "fsyncs",
                   "msgs/fsync", "vs async", "cpu vs"], widths))  # fmt: skip
        cases = [(FlushPolicy.ASYNC, THREAD_COUNTS[-1])]
        cases += [(FlushPolicy.SYNC, threads) for threads in THREAD_COUNTS]
        for policy, threads in cases:
            wall, cpu, p50, p99, fsyncs, count = threaded_case(
                base / "threads", policy, threads, args.sync_seconds
            )
            per_fsync = f"{count / fsyncs:,.1f}" if fsyncs else "-"
            emit(_row([policy.name, str(threads), f"{wall:,.0f}", f"{cpu:,.0f}", f"{p50:.2f}",
                       f"{p99:.2f}", str(fsyncs), per_fsync, f"{wall / async_single_100[0]:.2f}",
                       f"{cpu / async_single_100[1]:.2f}"], widths))  # fmt: skip
        emit("")
        emit(
            "asyncio producers (coroutines on one loop, await put_async), 100 B, MMAP, on "
            "asyncio's own loop and on uvloop. Ratios (wall, cpu) vs ASYNC with 64 coroutines "
            "on the same loop in this run: 'vs async' against producers that never yield (an "
            "ASYNC put never suspends, so one coroutine runs at a time), 'vs interleaved' "
            "against producers that yield to the loop after each put"
        )
        widths = [7, 6, 15, 10, 11, 8, 8, 8, 10, 12, 15]
        emit(_row(["loop", "policy", "producers", "msgs/s", "cpu msgs/s", "p50 ms", "p99 ms",
                   "fsyncs", "msgs/fsync", "vs async", "vs interleaved"], widths))  # fmt: skip
        top = THREAD_COUNTS[-1]
        loops = ["asyncio"] + (["uvloop"] if uvloop_available() else [])
        for loop in loops:
            aio_cases = [
                (FlushPolicy.ASYNC, top, False, True),
                (FlushPolicy.ASYNC, top, True, True),
            ]
            counts = THREAD_COUNTS if loop == "asyncio" else (top,)
            aio_cases += [(FlushPolicy.SYNC, count, False, True) for count in counts]
            if loop == "asyncio":
                aio_cases += [(FlushPolicy.SYNC, top, False, False)]  # segment warming off
            measured = []
            for policy, producers, yield_each, warm in aio_cases:
                result = asyncio_case(
                    base / "asyncio",
                    policy,
                    producers,
                    args.sync_seconds,
                    yield_each=yield_each,
                    warm=warm,
                    loop=loop,
                )
                measured.append((policy, producers, yield_each, warm, result))
            baseline = measured[0][4]  # ASYNC, producers that never yield
            interleaved = measured[1][4]  # ASYNC, producers that yield after each put
            for policy, producers, yield_each, warm, result in measured:
                wall, cpu, p50, p99, fsyncs, count, _ = result
                per_fsync = f"{count / fsyncs:,.1f}" if fsyncs else "-"
                label = f"{producers}, yield/put" if yield_each else str(producers)
                if not warm:
                    label = f"{producers}, no warming"
                ratio = f"{wall / baseline[0]:.2f} / {cpu / baseline[1]:.2f}"
                versus = f"{wall / interleaved[0]:.2f} / {cpu / interleaved[1]:.2f}"
                cells = [loop, policy.name, label, f"{wall:,.0f}", f"{cpu:,.0f}", f"{p50:.3f}",
                         f"{p99:.3f}", str(fsyncs), per_fsync, ratio, versus]  # fmt: skip
                emit(_row(cells, widths))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
