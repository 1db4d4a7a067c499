"""Side-by-side benchmark of rmq-spark against its peers (issue 15): Kafka and RocketMQ.

Two workloads (``--workloads``, both by default), each printing one table with ratios.

**reput**: in one run and one SparkSession (``local[2]``, the same Delta), the catch-up of a
backlog of the same N messages into SQL-visible Delta tables:

* **rmq-spark**: the messages are put into a fresh store with the embedded store
  (``MessageStore.put_batch``, batches of 256, ASYNC flush; not timed), then the reput job runs
  with ``availableNow`` (``rmq_spark.spark.reput.run_reput``, the job's defaults: 512 MiB per
  micro-batch, OPTIMIZE off as it would not fire in a run this short) into its three tables.
  Timed: from starting the query to its end, when every batch's commits have landed.
* **Kafka** (``kafka_peer.py``): a one-node KRaft broker on loopback; the *same* messages, read back
  from the store with ``format("rocketmq")``, are written to one topic with Spark's Kafka sink
  (key = the message's first key, value = its body, header TAGS; not timed); then a Structured
  Streaming query ``format("kafka")`` -> one Delta table with ``availableNow``. Timed the same way,
  twice: with Spark's default (the whole backlog in one batch) and with ``maxOffsetsPerTrigger``
  set to the messages per batch the reput had, so that the number of batches is not the difference.
  The reput then runs a second time (fresh tables): the table compares each side's first run
  (both pay their source's first-use costs in the session) and each side's second run.
  Two reference rows follow (``read_cases.py``): each source alone, a batch read into
  ``noop`` (best of 2), and each source -> one Delta table with ``availableNow`` (the
  catch-up's plan without the reput's work). Their ratio column is Kafka's msgs/s over ours too.

**produce** (``produce.py``, after the Spark session has stopped): the official Python client
against ``rmq-spark broker`` and Apache RocketMQ 5.3.3 (``rocketmq_peer.py``), SYNC flush both:
2 threads x 1 and x 32 sends in flight, the Java client with 32 and 256 async sends in flight
per thread, and a paced 500 msgs/s with 3 CPU-bound processes beside
(``--short``: 5 s and 20 s cases instead of 10 s and 30 s).

Before either reput timing, one small Delta append warms the session (class loading, the first Delta
snapshot), so neither side pays it, and each timed run of either side starts after an
``os.sync()`` (printed with its time), so that none pays for the write-back of what the step
before it wrote. Row counts are checked on both sides afterwards. The table goes to stdout,
progress to stderr, with the load average at the start and the end.
Run it under ``flock /tmp/bench.lock`` (``make bench-peers`` does), alone on the machine.

Usage::

    python bench/peers/run.py                      # 1,000,000 x 100 B
    python bench/peers/run.py --short              # 200,000 x 100 B
    python bench/peers/run.py --messages 1000000 --body-bytes 1024
    python bench/peers/run.py --workloads produce  # the produce comparison only
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from kafka_peer import (  # noqa: E402
    KAFKA_VERSION,
    KafkaBroker,
    PeerError,
    interrupt_on_sigterm,
    resolve_jars,
)
from produce import ProduceOptions, import_client, produce_table, run_produce  # noqa: E402
from read_cases import (  # noqa: E402
    kafka_reader,
    rocketmq_reader,
    time_noop_read,
    time_stream_to_delta,
)

from rmq_spark.errors import RmqError  # noqa: E402

TOPIC = "BenchTopic"
QUEUES = 4
PUT_BATCH = 256
SHORT_MESSAGES = 200_000
WORKLOADS = ("reput", "produce")


class UsageError(Exception):
    """A bad command-line value; the message names the option."""


@dataclasses.dataclass(frozen=True)
class Timing:
    messages: int
    seconds: float
    batches: int

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def _progress(message: str) -> None:
    print(f"peers: {message}", file=sys.stderr, flush=True)


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def write_rmq_store(store_dir: Path, count: int, body_bytes: int) -> None:
    """Put ``count`` messages into a fresh store: 4 queues, 5 tags, one key each."""
    from rmq_spark.store.config import FlushPolicy, StoreConfig
    from rmq_spark.store.message_store import MessageStore
    from rmq_spark.store.put import PutRequest, PutStatus

    rng = random.Random(7)
    bodies = [rng.randbytes(body_bytes) for _ in range(64)]
    config = StoreConfig(
        root_dir=store_dir, segment_size_bytes=256 << 20, flush_policy=FlushPolicy.ASYNC
    )
    store = MessageStore.open(config)
    try:
        for start in range(0, count, PUT_BATCH):
            requests = [
                PutRequest(
                    TOPIC,
                    bodies[index % 64],
                    queue_id=index % QUEUES,
                    tags=f"tag{index % 5}",
                    keys=(f"key-{index:010d}",),
                )
                for index in range(start, min(start + PUT_BATCH, count))
            ]
            results = store.put_batch(requests)
            bad = [r for r in results if r.status is not PutStatus.PUT_OK]
            if bad:
                raise PeerError(f"rmq-spark: put_batch refused a message: {bad[0].status}")
    finally:
        store.close()


def warm_up(spark, path: Path) -> None:  # noqa: ANN001
    spark.range(100).selectExpr("id AS a").coalesce(1).write.format("delta").save(str(path))


def settle() -> None:
    """Write back every dirty page before a timed run: each run starts on a quiet disk, not
    behind the kernel's write-back of what the step before it wrote (1 GiB produced into
    Kafka's log before the reput's first run, the reput's tables before Kafka's)."""
    started = time.perf_counter()
    os.sync()
    _progress(f"sync: {time.perf_counter() - started:.1f} s")


def time_reput(spark, store_dir: Path, tables: Path, batch_bytes: int) -> Timing:  # noqa: ANN001
    from rmq_spark.spark.reput import run_reput
    from rmq_spark.spark.reput_config import ReputConfig
    from rmq_spark.store.delay_levels import (
        DEFAULT_MESSAGE_DELAY_LEVEL,
        parse_message_delay_level,
    )

    config = ReputConfig(
        tables_dir=tables,
        available_now=True,
        max_bytes_per_trigger=batch_bytes,
        optimize_interval_batches=0,
    )
    levels = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)
    settle()
    started = time.perf_counter()
    writer = run_reput(spark, store_dir, config, levels)
    seconds = time.perf_counter() - started
    return Timing(writer.messages_written, seconds, writer.batches_written)


def produce_to_kafka(spark, store_dir: Path, servers: str) -> None:  # noqa: ANN001
    """Write the store's messages to the Kafka topic with Spark's Kafka sink (not timed)."""
    (
        spark.read.format("rocketmq")
        .load(str(store_dir))
        .selectExpr(
            "CAST(element_at(keys, 1) AS BINARY) AS key",
            "body AS value",
            "array(named_struct('key', 'TAGS', 'value', CAST(tags AS BINARY))) AS headers",
        )
        .write.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("kafka.linger.ms", "5")
        .option("topic", TOPIC)
        .save()
    )


def time_kafka(spark, servers: str, table: Path, max_offsets: int = 0) -> Timing:  # noqa: ANN001
    """The Kafka source -> one Delta table at ``table``; ``max_offsets``: maxOffsetsPerTrigger
    (0: Spark's default, the whole backlog in one batch)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    query = (
        reader.load()
        .writeStream.format("delta")
        .option("checkpointLocation", str(table.with_name(table.name + "-checkpoint")))
        .trigger(availableNow=True)
    )
    settle()
    started = time.perf_counter()
    running = query.start(str(table))
    running.awaitTermination()
    seconds = time.perf_counter() - started
    progress = running.recentProgress
    rows = sum(p["numInputRows"] for p in progress)
    return Timing(rows, seconds, sum(1 for p in progress if p["numInputRows"] > 0))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Reput catch-up vs Kafka -> Delta on the same messages, side by side in one "
        "run (issue 15). Prints one table: workload, rmq-spark msgs/s, Kafka msgs/s, ratio.",
        epilog="Run alone on the machine: flock /tmp/bench.lock python bench/peers/run.py",
    )
    parser.add_argument(
        "--messages", type=int, default=None, help="messages in the backlog (default 1,000,000)"
    )
    parser.add_argument("--body-bytes", type=int, default=100, help="body size (default 100)")
    parser.add_argument(
        "--short", action="store_true", help=f"{SHORT_MESSAGES:,} messages (unless --messages)"
    )
    parser.add_argument(
        "--batch-mib",
        type=int,
        default=512,
        help="reput maxBytesPerTrigger in MiB (default 512, the reput job's; 0: one batch)",
    )
    parser.add_argument(
        "--kafka-partitions", type=int, default=2, help="partitions of the Kafka topic (2)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work dir (store, tables)")
    parser.add_argument(
        "--workloads", default=",".join(WORKLOADS), help="comma-separated: reput, produce (both)"
    )
    args = parser.parse_args(argv)
    unknown = set(args.workloads.split(",")) - set(WORKLOADS)
    if unknown:
        raise UsageError(f"--workloads: unknown {sorted(unknown)}; known {list(WORKLOADS)}")
    if args.messages is None:
        args.messages = SHORT_MESSAGES if args.short else 1_000_000
    if args.messages < 1:
        raise UsageError(f"--messages: must be >= 1, got {args.messages}")
    if not 1 <= args.body_bytes <= 4 << 20:
        raise UsageError(f"--body-bytes: must be in [1, 4194304], got {args.body_bytes}")
    if args.batch_mib < 0:
        raise UsageError(f"--batch-mib: must be >= 0, got {args.batch_mib}")
    if args.kafka_partitions < 1:
        raise UsageError(f"--kafka-partitions: must be >= 1, got {args.kafka_partitions}")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    signal.signal(signal.SIGTERM, interrupt_on_sigterm)
    load_start = _load()
    work = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    try:
        status = 0
        if "reput" in args.workloads.split(","):
            status = _run(args, work, load_start)
        if status == 0 and "produce" in args.workloads.split(","):
            status = _run_produce(args)
        return status
    except (PeerError, RmqError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        _progress("interrupted; everything started was stopped")
        return 130
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def _run(args: argparse.Namespace, work: Path, load_start: str) -> int:
    from rmq_spark.spark.config import SparkConfig
    from rmq_spark.spark.session import build_session, session_conf
    from rmq_spark.spark.tables import MESSAGES, table_path

    spark_jars = resolve_jars("spark-kafka")
    resolve_jars("broker")
    n, body = args.messages, args.body_bytes
    _progress(f"load average at start {load_start}; work dir {work}")
    store_dir = work / "store"
    started = time.perf_counter()
    write_rmq_store(store_dir, n, body)
    _progress(f"rmq-spark: put {n:,} x {body} B in {time.perf_counter() - started:.1f} s")

    # The Kafka jars join the Delta ones when the session puts those on spark.jars itself.
    config = SparkConfig(master="local[2]", shuffle_partitions=2, log_level="ERROR")
    jars = [session_conf(config).get("spark.jars", ""), *map(str, spark_jars)]
    extra = (f"spark.jars={','.join(jar for jar in jars if jar)}",)
    spark = build_session(dataclasses.replace(config, extra_conf=extra))
    try:
        with KafkaBroker(partitions=args.kafka_partitions) as broker:
            _progress(f"kafka {KAFKA_VERSION}: up on {broker.bootstrap_servers}")
            started = time.perf_counter()
            produce_to_kafka(spark, store_dir, broker.bootstrap_servers)
            _progress(f"kafka: produced {n:,} messages in {time.perf_counter() - started:.1f} s")
            warm_up(spark, work / "warm-up")
            _progress("rmq-spark: reput --available-now into 3 Delta tables ...")
            rmq = time_reput(spark, store_dir, work / "tables", args.batch_mib << 20)
            _progress(f"rmq-spark: {rmq.messages:,} in {rmq.seconds:.1f} s, {rmq.batches} batches")
            peers = {}
            # Kafka's default (the whole backlog in one batch), then as many messages per
            # batch as the reput's batches held, so that batch count is not the difference.
            per_batch = -(-n // max(rmq.batches, 1))
            for name, max_offsets in (("default", 0), ("matched", per_batch)):
                _progress(f"kafka: format('kafka') -> one Delta table, availableNow, {name} ...")
                peer = time_kafka(
                    spark, broker.bootstrap_servers, work / f"kafka-{name}", max_offsets
                )
                _progress(
                    f"kafka: {peer.messages:,} in {peer.seconds:.1f} s, {peer.batches} batches"
                )
                rows = spark.read.format("delta").load(str(work / f"kafka-{name}")).count()
                if rows != n or peer.messages != n:
                    raise PeerError(f"kafka {name}: expected {n:,} rows, the table has {rows:,}")
                peers[name] = (peer, max_offsets)
            # Each side again, warm: Kafka's second run above found its source's code paths
            # warm, so the reput gets a second run too (fresh tables, the same backlog).
            rmq_warm = time_reput(spark, store_dir, work / "tables-2", args.batch_mib << 20)
            _progress(f"rmq-spark, second run: {rmq_warm.seconds:.1f} s")
            references = _reference_rows(spark, store_dir, broker.bootstrap_servers, work, n)
            messages = table_path(work / "tables", MESSAGES)
            rmq_rows = spark.read.format("delta").load(str(messages)).count()
    finally:
        spark.stop()
    if rmq_rows != n or rmq.messages != n:
        raise PeerError(
            f"rmq-spark: expected {n:,} rows; rmq.messages has {rmq_rows:,}, reput wrote "
            f"{rmq.messages:,}"
        )
    load_end = _load()
    print(f"| workload | rmq-spark msgs/s | Kafka {KAFKA_VERSION} msgs/s | Kafka / rmq-spark |")
    print("|---|---|---|---|")
    for (peer, max_offsets), ours, run in (
        (peers["default"], rmq, "first"),
        (peers["matched"], rmq_warm, "second"),
    ):
        batching = f"maxOffsetsPerTrigger {max_offsets:,}" if max_offsets else "Kafka default"
        print(
            f"| catch-up {n:,} x {body} B -> SQL-visible Delta, availableNow, {batching}, "
            f"{run} run of each "
            f"| {ours.rate:,.0f} ({ours.seconds:.1f} s, {ours.batches} batches, 3 tables) "
            f"| {peer.rate:,.0f} ({peer.seconds:.1f} s, {peer.batches} batches, 1 table) "
            f"| {peer.rate / ours.rate:.2f} |"
        )
    for line in references:
        print(line)
    print(f"load average (1/5/15 min): start {load_start}, end {load_end}")
    return 0


def _reference_rows(spark, store_dir: Path, servers: str, work: Path, n: int) -> list[str]:  # noqa: ANN001
    """Table rows for the sources alone: a batch read into ``noop`` and a stream into one
    Delta table, ours and Kafka's (``read_cases.py``)."""
    _progress("sources alone: batch read -> noop, stream -> one Delta table ...")
    ours = time_noop_read(lambda: rocketmq_reader(spark, store_dir, streaming=False))
    theirs = time_noop_read(lambda: kafka_reader(spark, servers, TOPIC, streaming=False))
    rows = [
        f"| batch read {n:,} messages -> noop (best of 2) | {n / ours:,.0f} ({ours:.1f} s) "
        f"| {n / theirs:,.0f} ({theirs:.1f} s) | {ours / theirs:.2f} |"
    ]
    ours_s, ours_rows = time_stream_to_delta(
        rocketmq_reader(spark, store_dir, streaming=True), work / "rocketmq-one-table"
    )
    theirs_s, theirs_rows = time_stream_to_delta(
        kafka_reader(spark, servers, TOPIC, streaming=True), work / "kafka-one-table"
    )
    if ours_rows != n or theirs_rows != n:
        raise PeerError(
            f"one Delta table: expected {n:,} rows, got {ours_rows:,} / {theirs_rows:,}"
        )
    rows.append(
        f'| format("rocketmq") / format("kafka") -> one Delta table, availableNow, '
        f"after the batch reads | {n / ours_s:,.0f} ({ours_s:.1f} s) "
        f"| {n / theirs_s:,.0f} ({theirs_s:.1f} s) | {ours_s / theirs_s:.2f} |"
    )
    return rows


def _run_produce(args: argparse.Namespace) -> int:
    load_start = _load()
    _progress(f"produce: load average at start {load_start}")
    seconds, rate_seconds = (5.0, 20.0) if args.short else (10.0, 30.0)
    options = ProduceOptions(
        argparse.Namespace(
            threads=2, inflight=32, seconds=seconds, warm_up_seconds=5.0, rate=500,
            rate_seconds=rate_seconds, burners=3, body_bytes=args.body_bytes,
            systems="rmq-spark,rocketmq", logs=None, java="32,256", shared_session=False,
        )
    )  # fmt: skip
    results = run_produce(import_client(), options)
    print()
    for line in produce_table(results):
        print(line)
    print(f"load average (1/5/15 min): start {load_start}, end {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
