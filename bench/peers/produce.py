"""Official-client produce: the rmq-spark broker against Apache RocketMQ 5.3.3, in one run.

The same client (``rocketmq-python-client``), the same messages (topic ``BenchTopic``, 8 queues,
one tag, ``--body-bytes`` random bytes, 100 by default) and the same threads go to each system
in turn, both flushing synchronously (rmq-spark ``store.flush_policy=SYNC``, RocketMQ
``SYNC_FLUSH``: a send is answered once its bytes are on disk):

* **closed loop**, ``--threads`` threads (2), each with its own ``Producer``, for ``--seconds``
  (10) each: with 1 send in flight per thread (``Producer.send``) and with ``--inflight`` (32)
  in flight per thread (``Producer.send_async``, a new send as soon as one completes).
  Reported: msgs/s, send latency p50/p99 (from the call to the receipt), failed sends.
* **paced under CPU contention**: ``--rate`` (500) msgs/s in all, spread over the threads and
  sent on a fixed schedule with ``send_async`` (a slow send does not delay the next), for
  ``--rate-seconds`` (30), while ``--burners`` (3) CPU-bound processes run beside the broker.
* with ``--java K,K``: the official Java client (``java_client.py``), ``--threads`` Producers
  with K async sends in flight each, one case per K (the broker, not the client, is then the
  bottleneck).

The rmq-spark broker, the RocketMQ JVMs and each CPU-bound process run in their own sessions:
with the kernel's autogroup scheduling, CPU is shared fairly between sessions first, so a broker
left in the harness's session would split one share with the client and the burners
(``--shared-session`` shows that).

Each system first gets ``WARM_UP`` sends per thread and ``--warm-up-seconds`` (5) of the
in-flight loop, not timed (the JVM's JIT, the first segment, the client's channels). The
broker's CPU time (``/proc/<pid>/stat``, all its processes) and the client's are read around
each case, so the table also says how much CPU each broker spent per message.
Progress goes to stderr, the table to stdout, with the load average at the start and the end.
Run it alone on the machine, under ``flock /tmp/bench.lock``.

Usage::

    python bench/peers/produce.py                  # ~3 min
    python bench/peers/produce.py --seconds 5 --rate-seconds 15
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from java_client import java_case  # noqa: E402
from peer_common import PeerError, interrupt_on_sigterm, progress  # noqa: E402
from produce_cases import CaseResult, closed_loop, paced, warm_up  # noqa: E402
from rmq_spark_broker import RmqSparkBroker  # noqa: E402
from rocketmq_peer import ROCKETMQ_VERSION, RocketMQBroker  # noqa: E402

__all__ = [
    "TOPIC",
    "ProduceOptions",
    "import_client",
    "main",
    "make_producers",
    "produce_table",
    "run_produce",
]

TOPIC = "BenchTopic"
WARM_UP = 200
SYSTEMS = ("rmq-spark", "rocketmq")


class UsageError(Exception):
    """A bad command-line value; the message names the option."""


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def import_client() -> ModuleType:
    """The official client, imported with HOME in a temp dir (it logs under ``~/logs``)."""
    home = tempfile.mkdtemp(prefix="peers-client-home-")
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    saved = os.environ.get("HOME")
    os.environ["HOME"] = home
    try:
        import rocketmq
    finally:
        if saved is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = saved
    return rocketmq


@contextmanager
def burners(count: int, own_session: bool = True) -> Iterator[None]:
    """``count`` CPU-bound processes (a Python busy loop each) for the duration of the block,
    each in its own session: under autogroup scheduling each is one more contender, as
    independent programs (a Spark job) are, not a share of the harness's session."""
    import subprocess

    procs = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            stdin=subprocess.DEVNULL,
            start_new_session=own_session,
        )
        for _ in range(count)
    ]
    try:
        time.sleep(0.5 if procs else 0)
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


class ProduceOptions:
    """The workload's knobs (the command line's values)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.threads: int = args.threads
        self.inflight: int = args.inflight
        self.seconds: float = args.seconds
        self.warm_up_seconds: float = args.warm_up_seconds
        self.rate: int = args.rate
        self.rate_seconds: float = args.rate_seconds
        self.burners: int = args.burners
        self.body: bytes = os.urandom(args.body_bytes)
        self.systems: tuple[str, ...] = tuple(args.systems.split(","))
        self.settings: tuple[str, ...] = ("store.flush_policy=SYNC", *args.set)
        self.logs: Path | None = args.logs
        self.shared_session: bool = args.shared_session
        self.java_inflight: tuple[int, ...] = tuple(
            int(item) for item in args.java.split(",") if item
        )


@contextmanager
def _system(name: str, options: ProduceOptions) -> Iterator[tuple[str, list[int]]]:
    """Start one system; yield its gRPC endpoint and the pids whose CPU is the broker's."""
    if name == "rmq-spark":
        keep = options.logs / "rmq-spark-broker.log" if options.logs else None
        own_session = not options.shared_session
        with RmqSparkBroker(
            settings=options.settings, keep_log=keep, own_session=own_session
        ) as broker:
            assert broker.process is not None
            yield broker.endpoint, [broker.process.pid]
    else:
        with RocketMQBroker(topics=(TOPIC,)) as peer:
            yield peer.endpoint, [process.pid for process in peer.processes]


def make_producers(rocketmq: ModuleType, endpoint: str, count: int) -> list[Any]:
    config = rocketmq.ClientConfiguration(endpoint, rocketmq.Credentials(), request_timeout=10)
    producers = []
    for _ in range(count):
        producer = rocketmq.Producer(config, (TOPIC,))
        producer.startup()
        producers.append(producer)
    return producers


def run_produce(rocketmq: ModuleType, options: ProduceOptions) -> dict[str, list[CaseResult]]:
    """Every case on every system in ``options.systems``; results by system, in case order."""
    results: dict[str, list[CaseResult]] = {}
    for name in options.systems:
        started = time.perf_counter()
        with _system(name, options) as (endpoint, pids):
            progress(f"{name}: up on {endpoint} in {time.perf_counter() - started:.1f} s")
            producers = make_producers(rocketmq, endpoint, options.threads)
            try:
                cases = _cases(rocketmq, producers, endpoint, pids, options)
            finally:
                for producer in producers:
                    producer.shutdown()
        for case in cases:
            progress(f"{name}: {case.summary()}")
        results[name] = cases
    return results


def _cases(
    rocketmq: ModuleType,
    producers: list[Any],
    endpoint: str,
    pids: list[int],
    options: ProduceOptions,
) -> list[CaseResult]:
    """Warm up, then every case in table order on one system."""
    body = options.body
    warm_up(rocketmq, producers, TOPIC, body, WARM_UP)
    closed_loop(rocketmq, producers, TOPIC, body, options.inflight, options.warm_up_seconds, pids)
    cases = [
        closed_loop(rocketmq, producers, TOPIC, body, inflight, options.seconds, pids)
        for inflight in (1, options.inflight)
    ]
    for inflight in options.java_inflight:
        java = java_case(
            endpoint, TOPIC, options.threads, inflight, options.seconds,
            options.warm_up_seconds, len(body), pids,
        )  # fmt: skip
        cases.append(java)
    with burners(options.burners, not options.shared_session):
        steady = paced(
            rocketmq, producers, TOPIC, body, options.rate, options.rate_seconds, pids,
            options.burners,
        )  # fmt: skip
    return [*cases, steady]


def produce_table(results: dict[str, list[CaseResult]]) -> list[str]:
    """Markdown rows: one per case, rmq-spark vs RocketMQ, with ratios (rmq-spark / RocketMQ)."""
    ours, peer = results.get("rmq-spark"), results.get("rocketmq")
    lines = [
        f"| produce, official client (Python unless said), SYNC flush | rmq-spark | RocketMQ "
        f"{ROCKETMQ_VERSION} proxy+broker | rmq-spark / RocketMQ |",
        "|---|---|---|---|",
    ]
    cases = ours or peer or []
    for index, case in enumerate(cases):
        mine = ours[index].cell() if ours else "-"
        theirs = peer[index].cell() if peer else "-"
        ratio = "-"
        if ours and peer:
            a, b = ours[index], peer[index]
            if a.paced:
                ratio = f"p50 {a.p50_ms / b.p50_ms:.2f}x, p99 {a.p99_ms / b.p99_ms:.2f}x"
            else:
                ratio = f"{a.rate / b.rate:.2f} (msgs/s)"
        lines.append(f"| {case.label} | {mine} | {theirs} | {ratio} |")
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Official-client produce, rmq-spark broker vs Apache RocketMQ "
        f"{ROCKETMQ_VERSION} (SYNC flush both), side by side in one run.",
        epilog="Run alone on the machine: flock /tmp/bench.lock python bench/peers/produce.py",
    )
    parser.add_argument("--threads", type=int, default=2, help="client threads (2)")
    parser.add_argument("--inflight", type=int, default=32, help="sends in flight/thread (32)")
    parser.add_argument("--seconds", type=float, default=10.0, help="per closed-loop case (10)")
    parser.add_argument(
        "--warm-up-seconds", type=float, default=5.0, help="untimed loop before the cases (5)"
    )
    parser.add_argument("--rate", type=int, default=500, help="paced case msgs/s (500)")
    parser.add_argument("--rate-seconds", type=float, default=30.0, help="paced case length (30)")
    parser.add_argument("--burners", type=int, default=3, help="CPU-bound processes (3)")
    parser.add_argument("--body-bytes", type=int, default=100, help="body size (100)")
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help="comma-separated, in order (both)"
    )
    parser.add_argument(
        "--java",
        default="",
        metavar="K,K",
        help="also the Java client (rocketmq-client-java), K async sends in flight per thread, "
        "one case per K (e.g. 32,256; default none)",
    )
    parser.add_argument(
        "--shared-session",
        action="store_true",
        help="run the rmq-spark broker and the CPU-bound processes in this process's session "
        "(with autogroup scheduling they then split one CPU share; the RocketMQ JVMs keep "
        "their own sessions): shows what that does, not a fair comparison",
    )
    parser.add_argument("--logs", type=Path, help="keep the rmq-spark broker's log in this dir")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the rmq-spark broker (e.g. broker.grpc_front=native); repeatable",
    )
    args = parser.parse_args(argv)
    for name in ("threads", "inflight", "rate", "body_bytes"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    if args.burners < 0 or args.warm_up_seconds < 0:
        raise UsageError("--burners and --warm-up-seconds must be >= 0")
    if args.seconds <= 0 or args.rate_seconds <= 0:
        raise UsageError("--seconds and --rate-seconds must be > 0")
    unknown = set(args.systems.split(",")) - set(SYSTEMS)
    if unknown:
        raise UsageError(f"--systems: unknown {sorted(unknown)}; known {list(SYSTEMS)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, interrupt_on_sigterm)
    load_start = _load()
    progress(f"load average at start {load_start}")
    try:
        results = run_produce(import_client(), ProduceOptions(args))
    except PeerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        progress("interrupted; everything started was stopped")
        return 130
    for line in produce_table(results):
        print(line)
    print(f"load average (1/5/15 min): start {load_start}, end {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
