"""Benchmark: the ConsumeQueue's CPU cost per message on the put path, by thread CPU time.

Wall-clock ratios (``bench_cq_dispatch.py``) move with whatever else the machine runs; CPU
time per thread does much less. For each case (ASYNC ``put``, ``put_batch(256)``,
``put_columns(256)``; 100 B bodies, TAGS, 4 queues round robin) the store is filled with
``store.consume_queue`` off, then on, and this prints microseconds of CPU per message of:

* ``put``: the producing thread (``time.thread_time``): the put path, including handing
  the dispatcher its facts and waking it;
* ``dispatch``: the dispatch thread (``pthread_getcpuclockid``): units built and written;
* ``process``: every thread (``time.process_time``), flush and housekeeping included;

then ``cq cost``: (put on - put off) + dispatch, and that cost as a share of the put path
with the queue off (the GIL serialises both threads, so this is what the queue takes from
put throughput). Each figure is the minimum of ``--repeat`` runs (noise only adds).

``--index`` adds a third run per case with ``store.message_index`` on (RocketMQ's ``index/``
built in the same dispatch rounds: every message has a UNIQ_KEY) and prints ``index cost``:
its extra put + dispatch CPU per message, and the dispatch CPU with the index over without.

Usage: python bench/bench_cq_cpu.py [--messages N] [--repeat R] [--dir DIR] [--case NAME]...
       [--index]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

# The same cases and store as bench_cq_dispatch.py (this folder is on sys.path when run).
from bench_cq_dispatch import BATCH, CASES, _config

from rmq_spark.store.message_store import MessageStore

_DISPATCH_THREAD = "rmq-cq-dispatch"


def _thread_cpu(name: str) -> Callable[[], float]:
    """CPU seconds of the live thread called ``name`` (0 when there is none)."""
    for thread in threading.enumerate():
        if thread.name == name and thread.ident is not None:
            clock = time.pthread_getcpuclockid(thread.ident)
            return lambda: time.clock_gettime(clock)
    return lambda: 0.0


def _run(
    root: Path, case: str, count: int, consume_queue: bool, index: bool = False
) -> tuple[float, float, float]:
    """One case into a fresh store: (put thread, dispatch thread, process) us/msg."""
    store = MessageStore.open(_config(root, consume_queue, index))
    try:
        dispatch_cpu = _thread_cpu(_DISPATCH_THREAD)
        put0, dispatch0, process0 = time.thread_time(), dispatch_cpu(), time.process_time()
        CASES[case](store, count)
        put1 = time.thread_time()
        if consume_queue:
            assert store.consume_queues.wait_dispatched(store.max_offset, 60)
        dispatch1, process1 = dispatch_cpu(), time.process_time()
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)
    scale = 1e6 / count
    return (put1 - put0) * scale, (dispatch1 - dispatch0) * scale, (process1 - process0) * scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--case", choices=list(CASES), action="append", help="default: all")
    parser.add_argument("--index", action="store_true", help="also with store.message_index")
    args = parser.parse_args()
    modes = (
        ((False, False), (True, False), (True, True))
        if args.index
        else ((False, False), (True, False))
    )
    count = args.messages // BATCH * BATCH
    base = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-cq-cpu-"))
    print(f"load average {os.getloadavg()[0]:.2f}; {count:,} messages, min of {args.repeat} runs")
    print(f"{'case':18} {'queue':5} {'put':>7} {'dispatch':>9} {'process':>8}  (us/msg CPU)")
    try:
        for case in args.case or CASES:
            best: dict[tuple[bool, bool], list[float]] = {}
            for _ in range(args.repeat):
                for mode in modes:
                    figures = _run(base / "store", case, count, *mode)
                    old = best.get(mode)
                    best[mode] = list(figures) if old is None else list(map(min, old, figures))
            for mode in modes:
                put, dispatch, process = best[mode]
                name = "+idx" if mode[1] else "on" if mode[0] else "off"
                print(f"{case:18} {name:5} {put:7.3f} {dispatch:9.3f} {process:8.3f}")
            off, on = best[(False, False)], best[(True, False)]
            cost = on[0] - off[0] + on[1]
            print(
                f"{case:18} cq cost {cost:.3f} us/msg = {cost / off[0] * 100:.1f} % of "
                f"the put path (expected on/off ~{off[0] / (off[0] + cost):.2f})"
            )
            if args.index:
                idx = best[(True, True)]
                extra = idx[0] - on[0] + idx[1] - on[1]
                print(
                    f"{case:18} index cost {extra:.3f} us/msg; dispatch cost with/without index "
                    f"{(idx[0] + idx[1] - off[0]) / max(on[0] + on[1] - off[0], 1e-9):.2f}x; "
                    f"cq+index cost {cost + extra:.3f} us/msg = "
                    f"{(cost + extra) / off[0] * 100:.1f} % of the put path"
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)
        print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
