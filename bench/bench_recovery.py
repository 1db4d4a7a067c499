"""Benchmark: how long ``MessageStore.open`` takes on a large log, normal vs abnormal recovery.

Builds a log of ``--gb`` GB (1 KiB bodies, ``put_batch``), then measures ``open``:

* normal: after a clean ``close`` (no ``abort``): the snapshot is at the end of the log, so
  recovery only rescans the idempotency window (and, with the window off, nothing);
* abnormal: after a simulated crash (``abandon``: ``abort`` stays, no final snapshot) with
  ``--tail-mb`` MB written since the last periodic snapshot: recovery scans the window and
  that tail, CRC-checked;
* baseline, measured in the same run: a full scan of the whole log (the snapshot removed),
  which is what restart would cost if it grew with the log. Ratios are against it.

Usage: python bench/bench_recovery.py [--gb G] [--tail-mb M] [--segment-mb S] [--dir DIR]
    [--no-record-crc]
Default: 1 GB log in 256 MiB segments, 64 MB tail (about a minute on 2 cores). The issue's
10 GB case: --gb 10 (about ten times longer to build; recovery times should not grow except
for the full-scan baseline). Refuses to start without room for the log plus 2 GB; progress
goes to stderr; the log is deleted at the end (also on Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rmq_spark.store.config import FlushPolicy, StoreConfig  # noqa: E402
from rmq_spark.store.message_store import MessageStore  # noqa: E402
from rmq_spark.store.put import PutRequest  # noqa: E402

BODY_SIZE = 1024
BATCH = 256
MB = 1_000_000


def _config(root: Path, segment_mb: int, window: int, record_crc: bool = True) -> StoreConfig:
    return StoreConfig(
        root_dir=root,
        append_record_crc=record_crc,
        segment_size_bytes=segment_mb << 20,
        flush_policy=FlushPolicy.ASYNC,
        clean_resource_interval_ms=0,
        snapshot_interval_ms=3_600_000,  # snapshots only when this script asks
        idempotency_window_messages=window,
    )


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _fill(store: MessageStore, total_bytes: int, *, report_every: int = 0) -> int:
    """Put 1 KiB messages until ``total_bytes`` were written; a progress line on stderr every
    ``report_every`` bytes (0: none)."""
    requests = [PutRequest("BenchTopic", b"r" * BODY_SIZE, queue_id=i % 8) for i in range(BATCH)]
    start = store.max_offset
    began = time.perf_counter()
    next_report = report_every
    count = 0
    while (written := store.max_offset - start) < total_bytes:
        results = store.put_batch(requests)
        if not results[0].ok:
            raise SystemExit(f"put failed: {results[0]}")
        count += len(results)
        if report_every and written >= next_report:
            elapsed = time.perf_counter() - began
            _progress(
                f"  built {written / 1e9:5.1f} of {total_bytes / 1e9:.1f} GB "
                f"({written / MB / elapsed:,.0f} MB/s)"
            )
            next_report += report_every
    return count


def _timed_open(config: StoreConfig) -> tuple[tuple[float, float], MessageStore]:
    """((wall seconds, CPU seconds), store) of one ``open``."""
    start, cpu = time.perf_counter(), time.process_time()
    store = MessageStore.open(config)
    return (time.perf_counter() - start, time.process_time() - cpu), store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="log size in GB")
    parser.add_argument("--tail-mb", type=int, default=64, help="MB written after the snapshot")
    parser.add_argument("--segment-mb", type=int, default=256, help="segment size in MiB")
    parser.add_argument("--window", type=int, default=100_000, help="idempotency window size")
    parser.add_argument("--dir", type=Path, default=None, help="where to build the log")
    parser.add_argument(
        "--no-record-crc",
        action="store_true",
        help="records without the __CRC32# property (recovery then checks BODYCRC only)",
    )
    args = parser.parse_args(argv)
    parent = Path(tempfile.mkdtemp(prefix="bench-recovery-", dir=args.dir))
    free = shutil.disk_usage(parent).free
    needed = int(args.gb * 1e9) + args.tail_mb * 2 * MB + 2 * 10**9
    if free < needed:
        os.rmdir(parent)
        raise SystemExit(f"not enough disk under {parent.parent}: {free / 1e9:.1f} GB free, "
                         f"{needed / 1e9:.1f} GB needed")  # fmt: skip
    root = parent / "store"
    try:
        config = _config(root, args.segment_mb, args.window, not args.no_record_crc)
        store = MessageStore.open(config)
        start = time.perf_counter()
        _progress(f"building a {args.gb:g} GB log in {root} ...")
        count = _fill(store, int(args.gb * 1e9), report_every=max(int(args.gb * 1e8), 100 * MB))
        build_s = time.perf_counter() - start
        log_bytes = store.max_offset
        store.close()
        print(
            f"# bench_recovery: log of {log_bytes / 1e9:.2f} GB, {count:,} records of "
            f"{BODY_SIZE} B bodies, {args.segment_mb} MiB segments, window {args.window:,} "
            f"msgs (built in {build_s:.1f} s)"
        )
        rows = []
        no_window = _config(root, args.segment_mb, 0, not args.no_record_crc)
        # With the window on first: a store opened with the window off forgets it.
        for name, cfg in (("", config), (", window off", no_window)):
            _progress(f"normal and abnormal open{name} ...")
            seconds, store = _timed_open(cfg)
            rows.append((f"normal{name or ' (clean shutdown)'}", seconds, store.recovery_report))
            store.snapshot()
            _fill(store, args.tail_mb * MB)
            store.abandon()
            seconds, store = _timed_open(cfg)
            label = f"abnormal{name or f' ({args.tail_mb} MB tail)'}"
            rows.append((label, seconds, store.recovery_report))
            store.close()

        (root / "queue_offsets.json").unlink()
        _progress(f"full scan of {log_bytes / 1e9:.1f} GB (the baseline) ...")
        seconds, store = _timed_open(config)
        baseline = seconds
        rows.append(("full scan (no snapshot)", seconds, store.recovery_report))
        store.close()

        print(f"{'case':>28}  {'open s':>8}  {'cpu s':>7}  {'scanned MB':>10}  "
              f"{'records':>10}  {'MB/s':>6}  {'vs full':>8}")  # fmt: skip
        for name, (seconds, cpu), report in rows:
            scanned = report.scanned_bytes / MB
            print(
                f"{name:>28}  {seconds:8.3f}  {cpu:7.3f}  {scanned:10.1f}  "
                f"{report.record_count:10,}  {scanned / seconds if seconds else 0:6.0f}  "
                f"{seconds / baseline[0]:8.3f}"
            )
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
