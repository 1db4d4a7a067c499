"""The broker's send cost with the official Java client: this checkout against an older commit's
broker, side by side in one run (issue 28's before -> after).

Both run ``rmq-spark broker`` over a fresh store with SYNC flush (every other setting at its
default), alternating ``--rounds`` times (baseline first); each round runs the Java client
(``java_client.py``: 2 Producers with K async sends in flight each, 100 B) once per K of
``--java``. Reported per case: msgs/s and the broker's CPU per message (all its threads, from
``/proc``), medians, and this checkout / baseline.

Usage::

    flock /tmp/bench.lock .venv/bin/python bench/peers/send_cost.py --baseline REV
        [--rounds 2] [--seconds 10] [--java 32,256] [--set KEY=VALUE ...]
        [--set-this KEY=VALUE ...] [--cpus 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from java_client import java_case  # noqa: E402
from limits import exported  # noqa: E402
from peer_common import progress  # noqa: E402
from rmq_spark_broker import REPO, RmqSparkBroker  # noqa: E402


def measure(
    checkout: Path, args: argparse.Namespace, extra: tuple[str, ...] = ()
) -> dict[int, tuple[float, float]]:
    row = {}
    settings = ("store.flush_policy=SYNC", *args.set, *extra)
    with RmqSparkBroker(checkout=checkout, settings=settings, cpus=args.cpus) as broker:
        for inflight in args.java:
            case = java_case(
                broker.endpoint, "BenchTopic", 2, inflight, args.seconds, 3.0, 100, [broker.pid]
            )
            if case.failed:
                raise SystemExit(f"send_cost: {case.failed} sends failed: {case.first_error}")
            row[inflight] = (case.rate, case.broker_cpu_us_per_msg)
    return row


def build_front(checkout: Path) -> None:
    """The native front of ``checkout``, built from its own sources into its own tree."""
    done = subprocess.run(
        [sys.executable, "-m", "rmq_spark.broker.grpc.native_front"],
        cwd=checkout, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"send_cost: the baseline's native front: {done.stderr.strip()}")
    progress(f"send_cost: the baseline's native front: {done.stdout.strip()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="git revision to compare")
    parser.add_argument("--rounds", type=int, default=2, help="measurements of each broker")
    parser.add_argument("--seconds", type=float, default=10.0, help="timed seconds a case")
    parser.add_argument(
        "--java",
        type=lambda text: [int(k) for k in text.split(",")],
        default=[32, 256],
        help="sends in flight per producer, one case each (32,256)",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--cpus",
        default="",
        help="the CPUs both brokers may use (taskset -c: 0 is one core, 0-1 two); default any",
    )
    parser.add_argument(
        "--set-this",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for this checkout's broker only (e.g. broker.event_loop=uvloop)",
    )
    args = parser.parse_args(argv)
    rows: dict[str, list[dict[int, tuple[float, float]]]] = {"baseline": [], "this": []}
    progress(f"send_cost: baseline {args.baseline}, load average {os.getloadavg()[0]:.2f}")
    with exported(args.baseline) as baseline:
        if any(setting == "broker.grpc_front=native" for setting in args.set):
            build_front(baseline)
        for round_no in range(1, args.rounds + 1):
            for name, checkout in (("baseline", baseline), ("this", REPO)):
                extra = tuple(args.set_this) if name == "this" else ()
                rows[name].append(measure(checkout, args, extra))
                progress(f"send_cost: round {round_no} {name}: {rows[name][-1]}")
    print(f"\n{'in flight':<12} {'figure':<15} {'baseline':>10} {'this':>10} {'this/base':>10}")
    for inflight in args.java:
        for index, figure in enumerate(("msgs_per_s", "cpu_us_per_msg")):
            base = statistics.median(row[inflight][index] for row in rows["baseline"])
            this = statistics.median(row[inflight][index] for row in rows["this"])
            label = f"2 x {inflight}"
            print(f"{label:<12} {figure:<15} {base:>10.1f} {this:>10.1f} {this / base:>9.2f}x")
    progress(f"send_cost: load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
