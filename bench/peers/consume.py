"""Consume, side by side: rmq-spark broker vs Apache RocketMQ 5.3.3, the official Python client.

For each system (``--systems``; SYNC flush both, each started as ``produce.py`` starts it):

* **put -> receive**: one SimpleConsumer long-polls (``receive(32, 30 s)`` with a 10 s await
  duration, acking each message) while 2 producers send ``--rate`` msgs/s for ``--seconds``
  (``send_async``, paced); each body carries its send time (ns, one clock), and the latency is
  the receive's return minus that (the send's own latency included). p50 / p99 / max of the
  messages sent after a ``--warmup`` (5 s; connections, routes, the JVM's JIT), which are
  received and acked but not timed, for every system and client alike.
* **backlog drain**: ``--backlog`` messages are sent first to a second topic (32 in flight
  per producer, not timed), then 2 SimpleConsumer threads of one group receive and ack until
  every message came; msgs/s from the first receive to the last ack. The in-process consumer
  of the embedded broker (``Broker.consumer``) drains the same backlog of a store put with
  ``put_batch``, as the rmq-spark-only reference (its CPU per message against another tree,
  rounds alternating: ``consume_cpu.py``).
* ``--client java`` (or ``both``): the same two figures with the official Java client
  (``java/ConsumeBench.java``: one paced Producer and a long-polling SimpleConsumer acking
  asynchronously; the drain's consumers ack asynchronously too), on topics of their own.

Usage::

    flock /tmp/bench.lock python bench/peers/consume.py [--rate 200 --seconds 30 --backlog 20000]
        [--client python|java|both]
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from peer_common import PeerError, progress  # noqa: E402
from produce import TOPIC, import_client, make_producers  # noqa: E402
from produce_cases import closed_loop, paced  # noqa: E402
from rmq_spark_broker import RmqSparkBroker  # noqa: E402
from rocketmq_peer import ROCKETMQ_VERSION, RocketMQBroker  # noqa: E402

GROUP = "bench-consumers"
DRAIN_TOPIC = "BenchDrain"
JAVA_TOPIC = "BenchJava"
JAVA_DRAIN_TOPIC = "BenchDrainJava"
JAVA_PROGRAM = HERE / "java" / "ConsumeBench.java"
INVISIBLE_S = 30
_STAMP = struct.Struct(">q")


@contextmanager
def _system(name: str, settings: Sequence[str] = ()) -> Iterator[str]:
    if name == "rmq-spark":
        with RmqSparkBroker(settings=("store.flush_policy=SYNC", *settings)) as broker:
            yield broker.endpoint
    else:
        with RocketMQBroker(topics=(TOPIC, DRAIN_TOPIC, JAVA_TOPIC, JAVA_DRAIN_TOPIC)) as peer:
            yield peer.endpoint


def _consumer(rocketmq: ModuleType, endpoint: str, group: str, topic: str = TOPIC) -> Any:
    config = rocketmq.ClientConfiguration(endpoint, rocketmq.Credentials(), request_timeout=40)
    consumer = rocketmq.SimpleConsumer(
        config, group, {topic: rocketmq.FilterExpression("*")}, await_duration=10
    )
    consumer.startup()
    return consumer


def _receive(consumer: Any) -> list[Any]:
    """One receive; a failed one is retried after 0.2 s, as an application would (RocketMQ's
    proxy answers the first receives of a consumer whose settings it has not yet had with an
    internal error)."""
    try:
        return list(consumer.receive(32, INVISIBLE_S))
    except Exception as err:  # noqa: BLE001 (logged, the loop goes on)
        progress(f"consume: receive failed, retried: {str(err)[:120]}")
        time.sleep(0.2)
        return []


def _pct(values: list[float], fraction: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * fraction))] if values else float("nan")


def put_to_receive(
    rocketmq: ModuleType, endpoint: str, rate: int, seconds: float, warmup: float
) -> str:
    """The put -> receive latencies of a long-polling consumer under a paced producer, of the
    messages sent after ``warmup`` seconds."""
    consumer = _consumer(rocketmq, endpoint, GROUP + "-latency")
    latencies_ms: list[float] = []
    received = [0]
    stop = threading.Event()
    measured_from = time.time_ns() + int(warmup * 1e9)

    def receive() -> None:
        while not stop.is_set():
            for message in _receive(consumer):
                now = time.time_ns()
                (sent,) = _STAMP.unpack_from(message.body)
                if sent >= measured_from:
                    latencies_ms.append((now - sent) / 1e6)
                received[0] += 1
                consumer.ack(message)

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    producers = make_producers(rocketmq, endpoint, 2)
    try:
        result = paced(rocketmq, producers, TOPIC, b"", rate, warmup + seconds, [], 0, stamp=_stamp)
        deadline = time.monotonic() + 60
        while received[0] < result.sent - result.failed and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        for producer in producers:
            producer.shutdown()
        thread.join(45)
        consumer.shutdown()
    worst = max(latencies_ms, default=float("nan"))
    return (
        f"{received[0]:,} of {result.sent:,} received ({len(latencies_ms):,} timed), "
        f"p50 {_pct(latencies_ms, 0.5):.1f} ms, "
        f"p99 {_pct(latencies_ms, 0.99):.1f} ms, max {worst:.1f} ms"
    )


def _stamp(body: bytes) -> bytes:
    return _STAMP.pack(time.time_ns()) + body


def drain(rocketmq: ModuleType, endpoint: str, backlog: int) -> str:
    """A backlog put first, then two consumers of one group take it all: msgs/s."""
    producers = make_producers(rocketmq, endpoint, 2)
    try:
        body = _STAMP.pack(0) + os.urandom(92)
        sent = closed_loop(rocketmq, producers, DRAIN_TOPIC, body, 32, 0, [], count=backlog)
    finally:
        for producer in producers:
            producer.shutdown()
    consumers = [_consumer(rocketmq, endpoint, GROUP, DRAIN_TOPIC) for _ in range(2)]
    done = [0, 0]
    started = time.perf_counter()
    finished = [started, started]

    def work(index: int) -> None:
        idle_since = time.monotonic()
        while sum(done) < sent.sent and time.monotonic() - idle_since < 15:
            messages = _receive(consumers[index])
            if messages:
                idle_since = time.monotonic()
            for message in messages:
                consumers[index].ack(message)
                done[index] += 1
            if messages:  # an empty long poll at the end is not drain time
                finished[index] = time.perf_counter()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for consumer in consumers:
        consumer.shutdown()
    seconds = max(finished) - started
    total = sum(done)
    return f"{total:,} of {sent.sent:,} in {seconds:.1f} s = {total / seconds:,.0f} msgs/s"


def _java(mode: str, endpoint: str, topic: str, *args: float) -> dict[str, str]:
    """Run ``ConsumeBench`` once; its result line as a dict."""
    from java_client import POM, compile_program
    from peer_common import fetch_jars, java_command

    classpath = compile_program(JAVA_PROGRAM, fetch_jars("java-client", POM))
    with tempfile.TemporaryDirectory(prefix="consume-java-") as home:
        command = [*java_command("512m", classpath, f"-Duser.home={home}"), "ConsumeBench",
                   mode, endpoint, topic, f"{GROUP}-java-{mode}", *map(str, args)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("received=")]
    if not lines:
        raise PeerError(f"ConsumeBench {mode}: no result (exit {done.returncode}): "
                        f"{done.stderr.strip()[-300:]}")  # fmt: skip
    return dict(item.split("=", 1) for item in lines[-1].split())


def java_put_to_receive(endpoint: str, rate: int, seconds: float, warmup: float) -> str:
    got = _java("latency", endpoint, JAVA_TOPIC, rate, seconds, warmup)
    return (
        f"{int(got['received']):,} of {int(got['sent']):,} received "
        f"({int(got['measured']):,} timed), p50 {got['p50_ms']} ms, "
        f"p99 {got['p99_ms']} ms, max {got['max_ms']} ms"
    )


def java_drain(endpoint: str, backlog: int) -> str:
    got = _java("drain", endpoint, JAVA_DRAIN_TOPIC, backlog, 2)
    total, seconds = int(got["received"]), float(got["seconds"])
    return f"{total:,} of {backlog:,} in {seconds:.1f} s = {total / seconds:,.0f} msgs/s"


def embedded_drain(backlog: int) -> str:
    """The in-process consumer of the embedded broker over a store put with put_batch."""
    from rmq_spark.broker.embedded import Broker
    from rmq_spark.store.put import PutRequest

    with tempfile.TemporaryDirectory(prefix="bench-consume-") as work:
        with Broker(Path(work) / "store") as broker:
            for start in range(0, backlog, 256):
                n = min(256, backlog - start)
                broker.store.put_batch([PutRequest(TOPIC, os.urandom(100)) for _ in range(n)])
            consumer = broker.consumer(GROUP, TOPIC)
            done = 0
            started = time.perf_counter()
            while done < backlog:
                messages = consumer.receive(max_messages=32, invisible_ms=30_000, wait_ms=1_000)
                if not messages:
                    break
                for message in messages:
                    consumer.ack(message)
                done += len(messages)
            seconds = time.perf_counter() - started
    return f"{done:,} of {backlog:,} in {seconds:.1f} s = {done / seconds:,.0f} msgs/s"


def _cases(rocketmq: ModuleType, endpoint: str, args: argparse.Namespace) -> dict[str, str]:
    paced_label = (
        f"put -> receive, {args.rate} msgs/s for {args.seconds:.0f} s after a "
        f"{args.warmup:.0f} s warm-up, long polling"
    )
    drain_label = f"drain a backlog of {args.backlog:,}, 2 consumers of one group"
    rows: dict[str, str] = {}
    if args.client in ("python", "both"):
        rows[f"Python: {paced_label}"] = put_to_receive(
            rocketmq, endpoint, args.rate, args.seconds, args.warmup
        )
        rows[f"Python: {drain_label}"] = drain(rocketmq, endpoint, args.backlog)
    if args.client in ("java", "both"):
        rows[f"Java: {paced_label}"] = java_put_to_receive(
            endpoint, args.rate, args.seconds, args.warmup
        )
        rows[f"Java: {drain_label}"] = java_drain(endpoint, args.backlog)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=200, help="paced msgs/s (200)")
    parser.add_argument("--seconds", type=float, default=30.0, help="paced seconds (30)")
    parser.add_argument(
        "--warmup", type=float, default=5.0, help="seconds sent but not timed first (5)"
    )
    parser.add_argument("--backlog", type=int, default=20_000, help="drained messages (20,000)")
    parser.add_argument("--systems", default="rmq-spark,rocketmq", help="(both)")
    parser.add_argument(
        "--client", choices=("python", "java", "both"), default="python", help="(python)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="a setting of the rmq-spark broker, as `rmq-spark broker --set` (repeatable)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    rocketmq = import_client()
    print(f"load at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(
        f"| consume, official {args.client} client(s) | rmq-spark | RocketMQ {ROCKETMQ_VERSION} |"
    )
    print("|---|---|---|")
    rows: dict[str, dict[str, str]] = {}
    try:
        for name in args.systems.split(","):
            progress(f"consume: {name} ...")
            with _system(name, args.set) as endpoint:
                rows[name] = _cases(rocketmq, endpoint, args)
    except PeerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    labels = next(iter(rows.values())).keys() if rows else ()
    for label in labels:
        cells = [rows.get(name, {}).get(label, "-") for name in ("rmq-spark", "rocketmq")]
        print(f"| {label} | {cells[0]} | {cells[1]} |")
    print(f"| in-process consumer (`Broker.consumer`), the same backlog | "
          f"{embedded_drain(args.backlog)} | - |")  # fmt: skip
    print(f"load at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
