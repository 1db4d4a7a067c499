"""One group's retry copies against another group's receives: this checkout's broker against an
older commit's, side by side in one run (issue 29: no put under the groups' lock).

Both brokers run ``rmq-spark broker`` over a fresh store with SYNC flush (a retry copy's put
waits for its fsync), the baseline exported with ``git archive`` at ``--baseline`` (the last
commit before issue 29; ``limits.py``'s machinery). For each broker, alternating ``--rounds``
times (baseline first), a backlog of ``--backlog`` x 100 B messages is put into one topic
(2 producers, 32 in flight, not timed), and 3 times as many of ``--nacked-bytes`` (100 B)
into a second topic; then:

* **nacker** (group ``bench-nacker``, the thin gRPC ``Consumer``, the second topic): receives
  32 at a time and nacks each one (ChangeInvisibleDuration 0), so each of its next receives
  stores a ``%RETRY%`` copy of every message it nacked (a SYNC put each), for the whole case;
* **reader** (group ``bench-reader``, the official Python SimpleConsumer, one thread): after
  ``--warmup`` s of nacking, receives 32 at a time and acks each message until it has the
  whole backlog.

Reported per broker: the reader's receive call p50 / p99 / max (ms, the call's wall time),
its msgs/s (first receive to last ack), the broker's CPU per message the reader got (user +
system over all its threads from ``/proc/<pid>/stat``, the nacker's work included) and the
nacker's nacks meanwhile (each a retry copy its next receive stores). ``--alone`` adds the
reader without the nacker, as the reference. The table at the end gives the medians and
this / baseline.

Usage::

    flock /tmp/bench.lock .venv/bin/python bench/peers/isolation.py [--baseline REV]
        [--rounds 2] [--backlog 10000] [--warmup 1] [--alone] [--nacked-bytes 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from limits import exported  # noqa: E402
from peer_common import progress  # noqa: E402
from produce import import_client, make_producers  # noqa: E402
from produce_cases import broker_cpu_s, closed_loop  # noqa: E402
from rmq_spark_broker import REPO, RmqSparkBroker  # noqa: E402

from rmq_spark.broker.consumer_client import Consumer  # noqa: E402

BASELINE_REVISION = "95dc808"
"""The last commit before issue 29 (the default baseline)."""
TOPIC = "BenchIsolation"
NACKED_TOPIC = "BenchNacked"
NACKER, READER = "bench-nacker", "bench-reader"
INVISIBLE_S = 30
BODY = b"x" * 100


class Nacker:
    """A thread that receives and nacks everything until stopped; counts its nacks."""

    def __init__(self, endpoint: str) -> None:
        self.nacked = 0
        self.errors = 0
        self._stop = threading.Event()
        self._consumer = Consumer(endpoint, NACKER, NACKED_TOPIC, request_timeout_s=30)
        self._thread = threading.Thread(target=self._run, name="nacker")

    def __enter__(self) -> Nacker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for message in self._consumer.receive(32, INVISIBLE_S * 1000, wait_ms=1_000):
                    self._consumer.change_invisible_duration(message, 0)
                    self.nacked += 1
            except Exception:  # noqa: BLE001 (counted; the case goes on)
                self.errors += 1
                time.sleep(0.1)


def _pct(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def read_backlog(rocketmq: ModuleType, broker: RmqSparkBroker, sent: int) -> dict[str, float]:
    """The reader drains ``sent`` messages; its receive calls' latencies and the broker CPU."""
    config = rocketmq.ClientConfiguration(
        broker.endpoint, rocketmq.Credentials(), request_timeout=40
    )
    reader = rocketmq.SimpleConsumer(
        config, READER, {TOPIC: rocketmq.FilterExpression("*")}, await_duration=5
    )
    reader.startup()
    latencies_ms: list[float] = []
    got = 0
    try:
        cpu0 = broker_cpu_s([broker.pid])
        started = last = time.perf_counter()
        idle_since = time.monotonic()
        while got < sent and time.monotonic() - idle_since < 30:
            begin = time.perf_counter()
            try:
                messages = list(reader.receive(32, INVISIBLE_S))
            except Exception:  # noqa: BLE001 (a first receive may fail; retried as apps do)
                time.sleep(0.2)
                continue
            latencies_ms.append((time.perf_counter() - begin) * 1000)
            if messages:
                idle_since, last = time.monotonic(), time.perf_counter()
            for message in messages:
                reader.ack(message)
                got += 1
        cpu_s = broker_cpu_s([broker.pid]) - cpu0
    finally:
        reader.shutdown()
    if got < sent:
        raise SystemExit(f"isolation: the reader got {got} of {sent}")
    return {
        "receive_p50_ms": _pct(latencies_ms, 0.50),
        "receive_p99_ms": _pct(latencies_ms, 0.99),
        "receive_max_ms": max(latencies_ms),
        "msgs_per_s": sent / (last - started),
        "cpu_us_per_msg": cpu_s / sent * 1e6,
    }


def _put_backlog(
    rocketmq: ModuleType, endpoint: str, topic: str, count: int, body: bytes = BODY
) -> int:
    producers = make_producers(rocketmq, endpoint, 2)
    try:
        return closed_loop(rocketmq, producers, topic, body, 32, 0, [], count=count).sent
    finally:
        for producer in producers:
            producer.shutdown()


def case(
    rocketmq: ModuleType, checkout: Path, args: argparse.Namespace, nack: bool
) -> dict[str, float]:
    settings = ("store.flush_policy=SYNC", f"broker.topics={TOPIC}:4,{NACKED_TOPIC}:4")
    with RmqSparkBroker(checkout=checkout, settings=settings) as broker:
        sent = _put_backlog(rocketmq, broker.endpoint, TOPIC, args.backlog)
        if not nack:
            return read_backlog(rocketmq, broker, sent)
        _put_backlog(
            rocketmq, broker.endpoint, NACKED_TOPIC, 3 * args.backlog, b"n" * args.nacked_bytes
        )
        with Nacker(broker.endpoint) as nacker:
            time.sleep(args.warmup)
            before = nacker.nacked
            row = read_backlog(rocketmq, broker, sent)
            row["nacks"] = float(nacker.nacked - before)
        return row


def report(results: dict[str, dict[str, list[dict[str, float]]]]) -> None:
    print(f"\n{'case':<18} {'figure':<16} {'baseline':>10} {'this':>10} {'this/base':>10}")
    for name, rows in results["baseline"].items():
        for figure in rows[0]:
            base = statistics.median(r[figure] for r in rows)
            this = statistics.median(r[figure] for r in results["this"][name])
            ratio = this / base if base else float("nan")
            print(f"{name:<18} {figure:<16} {base:>10.2f} {this:>10.2f} {ratio:>9.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE_REVISION, help="git revision to compare")
    parser.add_argument("--rounds", type=int, default=2, help="measurements of each broker")
    parser.add_argument("--backlog", type=int, default=10_000, help="messages the reader drains")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of nacking first")
    parser.add_argument("--alone", action="store_true", help="also the reader without a nacker")
    parser.add_argument("--nacked-bytes", type=int, default=100, help="body of nacked messages")
    args = parser.parse_args(argv)
    rocketmq = import_client()
    cases = {"reader + nacker": True, **({"reader alone": False} if args.alone else {})}
    results: dict[str, dict[str, list[dict[str, float]]]] = {
        "baseline": {name: [] for name in cases},
        "this": {name: [] for name in cases},
    }
    progress(
        f"isolation: baseline {args.baseline}, nacked bodies {args.nacked_bytes} B, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    with exported(args.baseline) as baseline:
        for round_no in range(1, args.rounds + 1):
            for name, nack in cases.items():
                for who, checkout in (("baseline", baseline), ("this", REPO)):
                    row = case(rocketmq, checkout, args, nack)
                    results[who][name].append(row)
                    progress(f"isolation: round {round_no} {name} {who}: {row}")
    report(results)
    progress(f"isolation: load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
