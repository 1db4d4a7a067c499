"""Benchmark: lookup by offset message id straight from the CommitLog, no Spark, no table.

Writes a synthetic store of N messages (``bench_source.write_store``, 1 GiB segments by default)
and times ``message_by_msg_id`` for record starts spread over every segment (the first
``--per-segment`` records of each). The store is closed (no broker), the case where finding the
log's end means validating the newest segment, which a point read must not pay for.

Usage::

    python bench/bench_msg_id.py --messages 10000000
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_source import write_store  # noqa: E402

from rmq_spark.spark.query import message_by_msg_id, record_at  # noqa: E402
from rmq_spark.store.msg_id import offset_msg_id  # noqa: E402
from rmq_spark.store.view import StoreView  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--segment-mib", type=int, default=1024)
    parser.add_argument("--per-segment", type=int, default=5, help="lookups per segment")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-msg-id-"))
    store = work / "store"
    try:
        started = time.perf_counter()
        end = write_store(store, args.messages, args.segment_mib << 20)
        print(
            f"wrote {args.messages:,} messages ({end / 2**20:,.0f} MiB of log) in "
            f"{time.perf_counter() - started:.1f} s",
            flush=True,
        )
        targets = []
        for span in StoreView.open(store).spans:
            offset = span.base_offset
            for _ in range(args.per_segment):
                decoded = record_at(store, offset)
                targets.append(offset_msg_id(decoded.record.store_host, offset))
                offset += decoded.total_size
        samples = []
        for msg_id in targets:
            started = time.perf_counter()
            message_by_msg_id(store, msg_id)
            samples.append(time.perf_counter() - started)
        print(
            f"lookup by msg id: median {statistics.median(samples) * 1000:.2f} ms, "
            f"max {max(samples) * 1000:.2f} ms over {len(samples)} lookups (0 table files)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
