"""The in-process consumer's CPU per message, this tree against another, rounds alternating.

``Broker.consumer`` (the embedded broker's consumer, no RPC) drains a backlog of ``--backlog``
x 100 B put with ``put_batch``, receiving 32 at a time and acking each; the figure is the
consumer thread's CPU time (``time.thread_time``) per message received and acknowledged,
which the dispatch and flush threads do not count into. Each tree runs in a child process
whose ``PYTHONPATH`` is that tree; rounds alternate between the trees, so the load of the
machine falls on both alike. Prints each run, then the median of each tree and their ratio.

Usage::

    flock /tmp/bench.lock python bench/peers/consume_cpu.py --against /tmp/old [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE_TREE = Path(__file__).resolve().parents[2]
TOPIC = "BenchCpu"


def drain(backlog: int) -> dict[str, float]:
    """One drain in this process (the tree on ``sys.path``): CPU and wall time per message."""
    from rmq_spark.broker.embedded import Broker
    from rmq_spark.store.put import PutRequest

    with tempfile.TemporaryDirectory(prefix="bench-consume-cpu-") as work:
        with Broker(Path(work) / "store") as broker:
            for start in range(0, backlog, 256):
                n = min(256, backlog - start)
                broker.store.put_batch([PutRequest(TOPIC, os.urandom(100)) for _ in range(n)])
            consumer = broker.consumer("bench-cpu", TOPIC)
            done = 0
            cpu, wall = time.thread_time(), time.perf_counter()
            while done < backlog:
                messages = consumer.receive(max_messages=32, invisible_ms=30_000, wait_ms=1_000)
                if not messages:
                    break
                for message in messages:
                    consumer.ack(message)
                done += len(messages)
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    return {"messages": done, "cpu_us": cpu / done * 1e6, "wall_us": wall / done * 1e6}


def _child(tree: Path, backlog: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = (
        f"import sys, json; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"import consume_cpu; print(json.dumps(consume_cpu.drain({backlog})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True, check=True
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, required=True, help="the other tree")
    parser.add_argument("--rounds", type=int, default=3, help="runs per tree (3)")
    parser.add_argument("--backlog", type=int, default=20_000, help="messages (20,000)")
    args = parser.parse_args(argv)
    print(f"load at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    trees = {"this": HERE_TREE, "against": args.against.resolve()}
    found: dict[str, list[float]] = {name: [] for name in trees}
    for round_no in range(args.rounds):
        order = list(trees) if round_no % 2 == 0 else list(reversed(trees))
        for name in order:
            got = _child(trees[name], args.backlog)
            found[name].append(got["cpu_us"])
            print(f"round {round_no + 1} {name:8s} {got['messages']:,.0f} msgs: "
                  f"{got['cpu_us']:.2f} us CPU, {got['wall_us']:.2f} us wall per message",
                  flush=True)  # fmt: skip
    medians = {name: statistics.median(values) for name, values in found.items()}
    for name, values in found.items():
        spread = f"{min(values):.2f}-{max(values):.2f}"
        print(f"{name} ({trees[name]}): median {medians[name]:.2f} us/msg (runs {spread})")
    print(f"this / against: {medians['this'] / medians['against']:.3f}x")
    print(f"load at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
