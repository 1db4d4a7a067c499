"""Put -> visible in SQL through the broker: an official client at a steady rate, the reput
job beside the broker, and how long each message took to reach its tables.

One run: ``rmq-spark broker`` (SYNC flush, its own session; ``--broker-set`` adds settings, e.g.
``--broker-set broker.grpc_front=native``), ``jobs/reput.py`` with its defaults (500 ms trigger;
``--reput-arg`` passes more arguments, e.g. ``--reput-arg=--trigger=1s``) over the broker's
store (its own session, as a ``spark-submit`` would be). First a warm-up (``--warm-up`` seconds
at the rate, to a topic of its own, waited for until visible: neither side's first batch or
first commit lands in the timed phase), then ``--threads`` producers of the official Python
client (``--client java``: the Java client) send ``--rate`` msgs/s in all on a fixed schedule
for ``--seconds`` to the timed topic. When every send completed and the tables hold every
message, the job stops and the latencies are read from the tables themselves: for every row of
``messages`` of the timed topic (selected by topic, never by time), the Delta commit that made
it visible (``commitInfo.timestamp`` of the version that added its file) minus the message's
``store_timestamp`` (when the broker stored it, ms; one clock, one machine). The client's send
latency (reported too, p50 a few ms) comes before that; its ``born_timestamp`` cannot be used:
the Python client sets it in whole seconds. Reported: p50/p99/max put -> visible, failed sends,
send p50/p99, the longest gap between two commits of ``consume_queue``, the reput's OPTIMIZE and
checkpoint runs, and from the job's timeline lines (``rmq_spark/spark/reput_timeline.py``) its
longest micro-batch and the three batches whose rows waited longest, each with where its time
went and the maintenance chores that ran beside it (``visible_profile.py``).

**Kafka** (``--systems``, both by default): Kafka 4.1.1 (``kafka_peer.py``), a Java producer
(``java/KafkaPacedProducer.java``, kafka-clients, ``acks=all``) at the same rate, the same
warm-up, and Spark's Kafka source -> one Delta table with a 1 s trigger in a process of its
own (``kafka_to_delta.py``); latency = commit time minus the record's CreateTime (ms). One
JSON line per system. The official Python client tops out near 1,500 msgs/s against the
rmq-spark broker (``produce.py``), so 2,000 msgs/s and more need the Java client.

Usage::

    flock /tmp/bench.lock python bench/peers/visible.py --rate 500 --seconds 300 --client java
        [--broker-set KEY=VALUE ...] [--reput-arg=ARG ...] [--systems rmq-spark,kafka]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from delta_log_tail import DeltaLogTail, following  # noqa: E402
from peer_common import (  # noqa: E402
    PeerError,
    checkout_env,
    fetch_jars,
    interrupt_on_sigterm,
    java_command,
    job_cpu_s,
    progress,
)  # noqa: E402
from produce import import_client, make_producers  # noqa: E402
from produce_cases import paced  # noqa: E402
from rmq_spark_broker import RmqSparkBroker  # noqa: E402
from visible_profile import slowest_batches, slowest_trigger  # noqa: E402

from rmq_spark.spark.reput_timeline import parse_timeline  # noqa: E402

TOPIC = "BenchTopic"
WARM_UP_TOPIC = "BenchWarmUp"  # not timed
JAVA_PRODUCER = HERE / "java" / "KafkaPacedProducer.java"
RMQ_JAVA_PRODUCER = HERE / "java" / "RmqPacedProducer.java"
JAVA_CLIENT_POM = HERE / "java-client.pom.xml"
START_TIMEOUT_S = 300.0
CATCH_UP_TIMEOUT_S = 300.0


def visible_latencies_ms(tail: DeltaLogTail, column: str, topic: str | None = None) -> list[int]:
    """Per row of the Delta table (whose ``topic`` is ``topic``, if given): the commit time
    of its file minus the row's timestamp ``column``. Rows are selected by what the sender
    set, never by time: a clock puts two phases in one millisecond."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    latencies: list[int] = []
    for commit in tail.commits():
        for name in commit.files:
            rows = pq.read_table(tail.table / name, columns=[column, *(["topic"] if topic else [])])
            if topic is not None:
                rows = rows.filter(pc.equal(rows["topic"], topic))
            millis = rows[column].cast(pa.timestamp("ms")).cast(pa.int64()).to_pylist()
            latencies.extend(commit.stamp_ms - value for value in millis)
    return sorted(latencies)


def batch_latencies(tail: DeltaLogTail, column: str, topic: str) -> list[dict[str, Any]]:
    """Per commit of the reput's table that added ``topic``'s rows: its ``batch_id``, commit
    time, rows, the oldest row's timestamp ``column`` and the slowest row's put -> visible."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    batches = []
    for commit in tail.commits():
        stamp_ms, meta = commit.stamp_ms, commit.meta
        millis: list[int] = []
        for name in commit.files:
            rows = pq.read_table(tail.table / name, columns=[column, "topic"])
            rows = rows.filter(pc.equal(rows["topic"], topic))
            millis += rows[column].cast(pa.timestamp("ms")).cast(pa.int64()).to_pylist()
        if millis and "batch_id" in meta:
            batches.append({
                "batch_id": int(meta["batch_id"]), "commit_ms": stamp_ms, "rows": len(millis),
                "oldest_ms": min(millis), "max_ms": stamp_ms - min(millis),
            })  # fmt: skip
    return batches


def paced_latencies_ms(messages: DeltaLogTail) -> list[int]:
    """Put -> visible of the paced phase's messages in the reput's ``messages`` table: the rows
    of the paced topic, which only the paced phase sends to (the warm-up has a topic of its
    own), so the count is exact whatever millisecond the broker stores either phase in."""
    return visible_latencies_ms(messages, "store_timestamp", TOPIC)


def longest_commit_gap_ms(tail: DeltaLogTail, since_ms: int) -> int:
    """The longest time between two commits that added files, from ``since_ms`` on."""
    stamps = [c.stamp_ms for c in tail.commits() if c.files and c.stamp_ms >= since_ms]
    return max((b - a for a, b in zip(stamps, stamps[1:], strict=False)), default=0)


def _wait(predicate, timeout_s: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise PeerError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _start_reput(
    store: Path, tables: Path, log_path: Path, extra: list[str]
) -> subprocess.Popen[bytes]:
    env = checkout_env(REPO, PYSPARK_PYTHON=sys.executable)
    with log_path.open("wb") as log:
        job = subprocess.Popen(
            [sys.executable, str(REPO / "jobs" / "reput.py"), "--store", str(store),
             "--tables", str(tables), *extra],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip
    _wait(lambda: _job_started(job, log_path), START_TIMEOUT_S, "reput")
    return job


def _job_started(job: subprocess.Popen[bytes], log_path: Path) -> bool:
    """Whether the reput job logged its start; a job that exited first fails the run at once
    with its last log line (not after ``START_TIMEOUT_S``)."""
    text = log_path.read_text(errors="replace")
    if "(checkpoint " in text:
        return True
    if job.poll() is not None:
        last = (text.strip().splitlines() or ["(no output)"])[-1]
        raise PeerError(f"the reput job exited with code {job.returncode}: {last}")
    return False


def _pct(values: list[int], fraction: float) -> int:
    return values[min(len(values) - 1, int(len(values) * fraction))] if values else -1


def _python_sends(
    args: argparse.Namespace, broker: RmqSparkBroker, topic: str, seconds: float
) -> dict[str, Any]:
    """The official Python client, ``--rate`` msgs/s to ``topic`` over ``--threads``
    producers for ``seconds``."""
    rocketmq = import_client()
    assert broker.process is not None
    producers = make_producers(rocketmq, broker.endpoint, args.threads)
    body = os.urandom(args.body_bytes)
    sends = paced(rocketmq, producers, topic, body, args.rate, seconds, [broker.process.pid], 0)
    for producer in producers:
        producer.shutdown()
    return {
        "sent": sends.sent, "failed": sends.failed,
        "send_p50_ms": round(sends.p50_ms, 1), "send_p99_ms": round(sends.p99_ms, 1),
    }  # fmt: skip


def _java_sends(
    args: argparse.Namespace, broker: RmqSparkBroker, topic: str, seconds: float
) -> dict[str, Any]:
    """The official Java client (``java/RmqPacedProducer.java``), paced over ``--threads``
    producers: the Python client cannot send much over 1,500 msgs/s."""
    from java_client import compile_program

    classpath = compile_program(RMQ_JAVA_PRODUCER, fetch_jars("java-client", JAVA_CLIENT_POM))
    fields = _run_java(
        [*java_command("512m", classpath), "RmqPacedProducer", broker.endpoint, topic,
         str(args.rate), str(seconds), str(args.body_bytes), str(args.threads)],
        seconds,
    )  # fmt: skip
    sent, failed = int(fields["sent"]), int(fields["failed"])
    if failed:
        progress(f"visible: {failed} sends failed, the first: {fields.get('first_error', '')}")
    return {
        "sent": sent, "failed": failed,
        "send_p50_ms": float(fields["p50_ms"]), "send_p99_ms": float(fields["p99_ms"]),
        "behind_schedule_ms": int(fields["behind_ms"]), "send_seconds": float(fields["seconds"]),
    }  # fmt: skip


def _run_java(command: list[str], seconds: float) -> dict[str, str]:
    """Run a paced Java producer; its last line's ``key=value`` fields."""
    produced = subprocess.run(
        command, capture_output=True, text=True, timeout=seconds + START_TIMEOUT_S
    )
    lines = produced.stdout.strip().splitlines()
    head, _, first_error = (lines[-1] if lines else "").partition(" first_error=")
    fields = dict(p.split("=", 1) for p in head.split(" ") if "=" in p)
    fields["first_error"] = first_error
    if produced.returncode != 0 or "sent" not in fields:
        raise PeerError(f"{command[-7]}: no result: {produced.stderr.strip()[-300:]}")
    return fields


def run_rmq_spark(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    tables, log_path = work / "tables", work / "reput.log"
    send = _java_sends if args.client == "java" else _python_sends
    messages = DeltaLogTail(tables / "messages")
    consume_queue = DeltaLogTail(tables / "consume_queue")
    with RmqSparkBroker(settings=("store.flush_policy=SYNC", *args.broker_set)) as broker:
        assert broker.workdir is not None
        job = _start_reput(broker.workdir / "store", tables, log_path, args.reput_args)
        try:
            with following(messages, consume_queue):
                stored = _warm_up(lambda: send(args, broker, WARM_UP_TOPIC, args.warm_up),
                                  messages.rows, args)  # fmt: skip
                progress(f"visible: {args.rate} msgs/s for {args.seconds} s ({args.client})")
                since_ms = int(time.time() * 1000)  # for the commit gaps only
                cpu_s = job_cpu_s(job.pid)
                sends = send(args, broker, TOPIC, args.seconds)
                stored += sends["sent"] - sends["failed"]
                _wait(lambda: messages.rows() >= stored, CATCH_UP_TIMEOUT_S, "catch-up")
                cpu_s = job_cpu_s(job.pid) - cpu_s
        finally:
            os.killpg(job.pid, signal.SIGTERM)
            job.wait(120)
    latencies = paced_latencies_ms(messages)
    log_text = log_path.read_text(errors="replace")
    events = parse_timeline(log_text)
    batches = batch_latencies(messages, "store_timestamp", TOPIC)
    return {
        "system": "rmq-spark",
        "client": args.client,
        "broker_set": args.broker_set,
        **sends,
        **_summary(latencies),
        "job_cpu_us_per_msg": _per_message_us(cpu_s, sends["sent"] - sends["failed"]),
        "longest_commit_gap_ms": longest_commit_gap_ms(consume_queue, since_ms),
        "optimize_runs": log_text.count("OPTIMIZE took"),
        "checkpoint_runs": log_text.count("checkpoint took"),
        "slowest_trigger": slowest_trigger(events, since_ms),
        "slowest_beside_maintenance": slowest_trigger(events, since_ms, beside=True),
        "slowest_batches": slowest_batches(batches, events),
    }


def _warm_up(send, committed, args: argparse.Namespace) -> int:  # noqa: ANN001
    """The warm-up phase: ``--warm-up`` seconds at ``--rate`` to a topic of its own (never
    timed), until its rows are visible, so that neither side's first-use costs (the first
    micro-batch, the first commit of each table) land in the timed phase. Returns the rows
    it stored."""
    if args.warm_up <= 0:
        return 0
    progress(f"visible: warm-up, {args.rate} msgs/s for {args.warm_up} s")
    sends = send()
    stored = int(sends["sent"]) - int(sends["failed"])
    _wait(lambda: committed() >= stored, CATCH_UP_TIMEOUT_S, "the warm-up")
    return stored


def _per_message_us(cpu_s: float, messages: int) -> float:
    """The Spark job's CPU (driver JVM, Python workers, all threads) per message of the timed
    phase, from the paced sends' start until their rows were visible."""
    return round(cpu_s * 1e6 / messages, 1) if messages else -1.0


def _summary(latencies: list[int]) -> dict[str, int]:
    return {
        "visible_p50_ms": _pct(latencies, 0.5),
        "visible_p99_ms": _pct(latencies, 0.99),
        "visible_max_ms": latencies[-1] if latencies else -1,
        "rows": len(latencies),
    }


def run_kafka(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The same rate into Kafka (acks=all), Spark's Kafka source -> one Delta table."""
    from java_client import compile_program
    from kafka_peer import KafkaBroker, resolve_jars

    classpath = compile_program(JAVA_PRODUCER, resolve_jars("broker"))
    work.mkdir(parents=True, exist_ok=True)
    table, log_path = work / "kafka-table", work / "kafka-query.log"
    tail = DeltaLogTail(table)
    with KafkaBroker(partitions=2) as broker:
        servers = broker.bootstrap_servers
        with log_path.open("wb") as log:
            query = subprocess.Popen(
                [sys.executable, str(HERE / "kafka_to_delta.py"), servers,
                 f"{TOPIC},{WARM_UP_TOPIC}", str(table)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        try:
            with following(tail):
                _wait(lambda: "started" in log_path.read_text(errors="replace"), START_TIMEOUT_S,
                      "the Kafka query")  # fmt: skip

                def send(topic: str, seconds: float) -> dict[str, str]:
                    return _run_java(
                        [*java_command("256m", classpath), "KafkaPacedProducer", servers, topic,
                         str(args.rate), str(seconds), str(args.body_bytes)],
                        seconds,
                    )  # fmt: skip

                stored = _warm_up(lambda: send(WARM_UP_TOPIC, args.warm_up),
                                  tail.rows, args)  # fmt: skip
                progress(f"visible: kafka, {args.rate} msgs/s for {args.seconds} s ...")
                since_ms = int(time.time() * 1000)
                cpu_s = job_cpu_s(query.pid)
                counts = send(TOPIC, args.seconds)
                sent, failed = int(counts["sent"]), int(counts["failed"])
                stored += sent - failed
                _wait(lambda: tail.rows() >= stored, CATCH_UP_TIMEOUT_S, "Kafka catch-up")
                cpu_s = job_cpu_s(query.pid) - cpu_s
        finally:
            os.killpg(query.pid, signal.SIGTERM)
            query.wait(120)
    latencies = visible_latencies_ms(tail, "timestamp", TOPIC)
    return {
        "system": "kafka",
        "sent": sent,
        "failed": failed,
        **_summary(latencies),
        "job_cpu_us_per_msg": _per_message_us(cpu_s, sent - failed),
        "longest_commit_gap_ms": longest_commit_gap_ms(tail, since_ms),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=500, help="msgs/s in all (500)")
    parser.add_argument("--seconds", type=float, default=60, help="how long to send (60)")
    parser.add_argument("--threads", type=int, default=2, help="producers (2)")
    parser.add_argument(
        "--warm-up", type=float, default=10,
        help="seconds of sends to a topic of their own, waited for until visible, before the "
        "timed phase (10; 0: none)",
    )  # fmt: skip
    parser.add_argument("--body-bytes", type=int, default=100, help="body size (100)")
    parser.add_argument(
        "--systems", default="rmq-spark,kafka", help="comma-separated: rmq-spark, kafka (both)"
    )
    parser.add_argument(
        "--client", choices=("python", "java"), default="python",
        help="the official client that sends to the rmq-spark broker (python; java for rates "
        "over ~1,500 msgs/s)",
    )  # fmt: skip
    parser.add_argument(
        "--reput-arg", dest="reput_args", action="append", default=[],
        help="one more argument of the reput job, e.g. --reput-arg=--trigger=1s or "
        "--reput-arg=--set=reput.optimize_interval_batches=10 (repeatable; default: the "
        "job's own defaults)",
    )  # fmt: skip
    parser.add_argument(
        "--broker-set", action="append", default=[], metavar="KEY=VALUE",
        help="one more setting of the rmq-spark broker, after SYNC flush, e.g. "
        "--broker-set broker.grpc_front=native (repeatable)",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    args = parser.parse_args(argv)
    load_start = " ".join(f"{v:.2f}" for v in os.getloadavg())
    work = Path(tempfile.mkdtemp(prefix="bench-visible-"))
    runners = {"rmq-spark": run_rmq_spark, "kafka": run_kafka}
    systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    unknown = sorted(set(systems) - set(runners))
    if unknown:
        print(f"error: --systems: unknown {unknown}; one of {sorted(runners)}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, interrupt_on_sigterm)
    try:
        for name in systems:
            result = runners[name](args, work / name)
            result.update(rate=args.rate, seconds=args.seconds, load_start=load_start)
            result["load_end"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
            print(json.dumps(result), flush=True)
    except PeerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        progress("interrupted; everything started was stopped")
        return 130
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
