"""What the broker's request limits cost: this checkout's broker against an older commit's, side
by side in one run, with the official Python client.

The baseline is the project's own broker at ``--baseline`` (a git revision; by default the
last commit before issue 25 added the connection, request-memory, filter and name limits),
exported with ``git archive`` into a temporary directory and run from there (``PYTHONPATH``
first, so its ``rmq_spark`` is the one imported). Both run ``rmq-spark broker`` on loopback over
a fresh store with SYNC flush and every other setting at its default, so the limits are on as a
user gets them. For each broker, alternating ``--rounds`` times (baseline first):

* **send**: 2 producers x 32 sends in flight (``send_async``), 100 B bodies with a tag, for
  ``--seconds``: msgs/s, p50 / p99, and the broker's CPU per message (user + system over all
  its threads, from ``/proc/<pid>/stat``);
* **receive**: a backlog of ``--backlog`` such messages, then 2 SimpleConsumer threads of one
  group receive (32 at a time) and ack until all came, once with the filter ``*`` and once
  with the SQL92 filter ``TAGS = 'bench' AND (a IS NULL OR a > 3)`` (every message matches):
  msgs/s from the first receive to the last ack and the broker's CPU per message.

Each line prints as it is measured; the table at the end gives the medians and this checkout /
baseline as a ratio (msgs/s: above 1 is faster; CPU: below 1 is cheaper).

Usage::

    flock /tmp/bench.lock .venv/bin/python bench/peers/limits.py [--baseline REV]
        [--rounds 2] [--seconds 10] [--backlog 20000] [--cases send,receive,sql]
        [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from peer_common import progress  # noqa: E402
from produce import TOPIC, import_client, make_producers  # noqa: E402
from produce_cases import broker_cpu_s, closed_loop  # noqa: E402
from rmq_spark_broker import REPO, RmqSparkBroker  # noqa: E402
from rocketmq.v5.model.filter_expression import FilterType  # noqa: E402

BASELINE_REVISION = "52416d9"
"""The last commit before issue 25's limits (the default baseline)."""
GROUP = "bench-limits"
SQL_FILTER = "TAGS = 'bench' AND (a IS NULL OR a > 3)"
INVISIBLE_S = 30
BODY = b"x" * 100


@contextmanager
def exported(revision: str) -> Iterator[Path]:
    """The tree of ``revision`` in a temporary directory (removed on leaving)."""
    target = Path(tempfile.mkdtemp(prefix="bench-limits-baseline-"))
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", revision, "conf", "rmq_spark"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
        yield target
    finally:
        shutil.rmtree(target, ignore_errors=True)


def send_case(rocketmq: ModuleType, broker: RmqSparkBroker, seconds: float) -> dict[str, float]:
    producers = make_producers(rocketmq, broker.endpoint, 2)
    try:
        closed_loop(rocketmq, producers, TOPIC, BODY, 32, 0, [], count=2000)  # warm-up
        result = closed_loop(rocketmq, producers, TOPIC, BODY, 32, seconds, [broker.pid])
    finally:
        for producer in producers:
            producer.shutdown()
    if result.failed:
        raise SystemExit(f"limits: {result.failed} sends failed: {result.first_error}")
    return {
        "msgs_per_s": result.rate,
        "p50_ms": result.p50_ms,
        "p99_ms": result.p99_ms,
        "cpu_us_per_msg": result.broker_cpu_us_per_msg,
    }


def _consumer(rocketmq: ModuleType, endpoint: str, topic: str, expression: Any) -> Any:
    config = rocketmq.ClientConfiguration(endpoint, rocketmq.Credentials(), request_timeout=40)
    consumer = rocketmq.SimpleConsumer(config, GROUP, {topic: expression}, await_duration=5)
    consumer.startup()
    return consumer


def receive_case(
    rocketmq: ModuleType, broker: RmqSparkBroker, backlog: int, sql: bool
) -> dict[str, float]:
    topic = f"{TOPIC}Drain{'Sql' if sql else 'All'}"
    producers = make_producers(rocketmq, broker.endpoint, 2)
    try:
        sent = closed_loop(rocketmq, producers, topic, BODY, 32, 0, [], count=backlog).sent
    finally:
        for producer in producers:
            producer.shutdown()
    expression = (
        rocketmq.FilterExpression(SQL_FILTER, FilterType.SQL)
        if sql
        else rocketmq.FilterExpression("*")
    )
    consumers = [_consumer(rocketmq, broker.endpoint, topic, expression) for _ in range(2)]
    done = [0, 0]
    cpu0 = broker_cpu_s([broker.pid])
    started = time.perf_counter()
    finished = [started, started]

    def work(index: int) -> None:
        idle_since = time.monotonic()
        while sum(done) < sent and time.monotonic() - idle_since < 15:
            try:
                messages = list(consumers[index].receive(32, INVISIBLE_S))
            except Exception:  # noqa: BLE001 (a first receive may fail; retried as apps do)
                time.sleep(0.2)
                continue
            if messages:
                idle_since = time.monotonic()
                finished[index] = time.perf_counter()
            for message in messages:
                consumers[index].ack(message)
                done[index] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu_s = broker_cpu_s([broker.pid]) - cpu0
    for consumer in consumers:
        consumer.shutdown()
    if sum(done) < sent:
        raise SystemExit(f"limits: received {sum(done)} of {sent} ({topic})")
    seconds = max(finished) - started
    return {"msgs_per_s": sent / seconds, "cpu_us_per_msg": cpu_s / sent * 1e6}


CASES = ("send", "receive", "sql")
"""``--cases``: the send case, the receive case with ``*``, the one with SQL92."""


def measure(
    rocketmq: ModuleType, checkout: Path, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    row: dict[str, dict[str, float]] = {}
    settings = ("store.flush_policy=SYNC", *args.set)
    with RmqSparkBroker(checkout=checkout, settings=settings) as broker:
        if "send" in args.cases:
            row["send"] = send_case(rocketmq, broker, args.seconds)
        if "receive" in args.cases:
            row["receive *"] = receive_case(rocketmq, broker, args.backlog, sql=False)
        if "sql" in args.cases:
            row["receive SQL92"] = receive_case(rocketmq, broker, args.backlog, sql=True)
    return row


def _cases(text: str) -> tuple[str, ...]:
    cases = tuple(case.strip() for case in text.split(",") if case.strip())
    unknown = [case for case in cases if case not in CASES]
    if unknown or not cases:
        raise argparse.ArgumentTypeError(
            f"cases: one or more of {', '.join(CASES)}, comma-separated; got {text!r}"
        )
    return cases


def _median(rows: list[dict[str, dict[str, float]]], case: str, figure: str) -> float:
    return statistics.median(row[case][figure] for row in rows)


def report(results: dict[str, list[dict[str, dict[str, float]]]]) -> None:
    print(f"\n{'case':<15} {'figure':<15} {'baseline':>10} {'this':>10} {'this/base':>10}")
    for case in results["baseline"][0]:
        for figure in results["baseline"][0][case]:
            base = _median(results["baseline"], case, figure)
            this = _median(results["this"], case, figure)
            print(f"{case:<15} {figure:<15} {base:>10.2f} {this:>10.2f} {this / base:>9.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE_REVISION, help="git revision to compare")
    parser.add_argument("--rounds", type=int, default=2, help="measurements of each broker")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the send case")
    parser.add_argument("--backlog", type=int, default=20000, help="messages per receive case")
    parser.add_argument(
        "--cases",
        type=_cases,
        default=CASES,
        help=f"comma-separated cases to run (default: {','.join(CASES)})",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting for both brokers (e.g. broker.tls_mode=disabled: no front)",
    )
    args = parser.parse_args(argv)
    rocketmq = import_client()
    results: dict[str, list[dict[str, dict[str, float]]]] = {"baseline": [], "this": []}
    progress(f"limits: baseline {args.baseline}, load average {os.getloadavg()[0]:.2f}")
    with exported(args.baseline) as baseline:
        for round_no in range(1, args.rounds + 1):
            for name, checkout in (("baseline", baseline), ("this", REPO)):
                row = measure(rocketmq, checkout, args)
                results[name].append(row)
                progress(f"limits: round {round_no} {name}: {row}")
    report(results)
    progress(f"limits: load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
