"""Where the rmq-spark broker's CPU goes, per message, under the produce workload's load.

Starts ``rmq-spark broker`` (SYNC flush, its own session, as ``produce.py`` does), drives it with
the official Python client (``--threads`` x ``--inflight`` sends in flight, 100 B) and, over
``--seconds`` of that load, reads:

* the CPU time of each of the broker's OS threads (``/proc/<pid>/task/*/stat``): the Python
  threads, grpc's C-core ``event_engine`` threads and the kernel's io_uring workers, each in
  microseconds per message;
* with ``--py-spy PATH`` (``pip install --target DIR py-spy``), a py-spy sample of the Python
  threads (``--nonblocking``, 200 Hz), each sample put in one layer by its innermost frame of
  ours: the gRPC/asyncio machinery (grpc.aio's C extension and the event loop, where no frame
  of ours is on the stack), ``broker/grpc/grpc_api.py``, the rest of ``broker/``, the store's put
  path, its group commit and fdatasync, the segment warmer. The layers' shares are scaled to
  the busiest thread's (the event loop's) CPU per message.

Usage::

    flock /tmp/bench.lock python bench/peers/profile_broker.py [--py-spy /tmp/pyspy/bin/py-spy]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from produce import TOPIC, import_client, make_producers  # noqa: E402
from produce_cases import closed_loop, warm_up  # noqa: E402
from rmq_spark_broker import RmqSparkBroker  # noqa: E402

__all__ = ["classify", "main", "thread_cpu_s"]

TICKS = os.sysconf("SC_CLK_TCK")
COMMIT_MODULES = ("ring_commit.py", "async_commit.py", "durability.py", "uring.py", "flush.py")
MACHINERY = "gRPC aio + asyncio machinery (C extension, event loop, selector)"
OTHER_THREADS = "other Python threads (no frame of ours)"
WARMER = "store: segment warmer thread"


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds per OS thread of ``pid``, keyed ``name/tid``."""
    found: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # the thread ended
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        found[f"{name}/{tid}"] = (int(fields[11]) + int(fields[12])) / TICKS
    return found


def classify(frames: Sequence[str]) -> str:
    """The layer of one py-spy stack (outermost frame first): its innermost frame of ours."""
    for frame in reversed(frames):
        if frame.startswith(("Handle._run ", "BaseEventLoop._run_once ")):
            return MACHINERY
        if frame.startswith(("Thread.run ", "Thread._bootstrap")):
            return OTHER_THREADS
        match = re.search(r"\((rmq_spark/[^:)]+)", frame)
        if match is None:
            continue
        path = match.group(1)
        module = path.rsplit("/", 1)[-1]
        if path.startswith("rmq_spark/store/"):
            if module in COMMIT_MODULES:
                return "store: group commit + fdatasync (io_uring)"
            if module == "warm.py":
                return WARMER
            return "store: put (encode, CRC, append)"
        if module in ("grpc_api.py", "grpc_producer.py", "grpc_telemetry.py", "grpc_wire.py"):
            return "broker: grpc_api.py (protobuf <-> command, checks)"
        return "broker: service and the rest of broker/"
    return MACHINERY


def layers(raw: Path) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            counts[classify(stack.split(";"))] += int(count)
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--inflight", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--py-spy", type=Path, help="py-spy executable (optional)")
    args = parser.parse_args(argv)
    rocketmq = import_client()
    body = os.urandom(100)
    with RmqSparkBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        assert broker.process is not None
        pid = broker.process.pid
        producers = make_producers(rocketmq, broker.endpoint, args.threads)
        try:
            warm_up(rocketmq, producers, TOPIC, body, 200)
            closed_loop(rocketmq, producers, TOPIC, body, args.inflight, 3.0, [pid])
            raw = Path(tmp) / "py-spy.txt"
            spy = None
            if args.py_spy:
                spy = subprocess.Popen(
                    [str(args.py_spy), "record", "--nonblocking", "--format", "raw", "-r", "200",
                     "-o", str(raw), "--pid", str(pid), "-d", str(int(args.seconds))],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    env={**os.environ, "PYTHONPATH": str(args.py_spy.parent.parent)},
                )  # fmt: skip
            before = thread_cpu_s(pid)
            case = closed_loop(rocketmq, producers, TOPIC, body, args.inflight, args.seconds, [pid])
            after = thread_cpu_s(pid)
            if spy is not None:
                spy.wait()
        finally:
            for producer in producers:
                producer.shutdown()
        print(case.summary())
        _print_threads(before, after, case.sent)
        if spy is not None and raw.exists():
            busiest = max(after[key] - before.get(key, 0.0) for key in after)
            _print_layers(layers(raw), busiest / case.sent * 1e6)
    return 0


def _print_threads(before: dict[str, float], after: dict[str, float], sent: int) -> None:
    by_kind: collections.Counter[str] = collections.Counter()
    for key, value in after.items():
        by_kind[key.split("/")[0].rstrip("-0123456789")] += value - before.get(key, 0.0)
    busiest = max(after, key=lambda key: after[key] - before.get(key, 0.0))
    print("| broker OS threads | CPU s | us/msg |\n|---|---|---|")
    for kind, seconds in by_kind.most_common():
        print(f"| {kind} | {seconds:.2f} | {seconds / sent * 1e6:,.0f} |")
    spent = after[busiest] - before.get(busiest, 0.0)
    print(f"| (busiest thread {busiest}) | {spent:.2f} | {spent / sent * 1e6:,.0f} |")


def _print_layers(counts: collections.Counter[str], loop_us: float) -> None:
    """The event loop thread's layers (the samples of the other threads are left out: py-spy
    counts some of their waits as busy, and /proc says how little CPU they use)."""
    for other in (WARMER, OTHER_THREADS):
        counts.pop(other, None)
    total = sum(counts.values())
    print(f"\n| event loop thread, by layer (py-spy, {total:,} samples) | share | us/msg |")
    print("|---|---|---|")
    for layer, count in counts.most_common():
        print(f"| {layer} | {count / total:.1%} | {count / total * loop_us:,.0f} |")


if __name__ == "__main__":
    sys.exit(main())
