"""Benchmark of the ``rocketmq`` Spark source against Spark's native Parquet reader.

Writes a store of N messages (100-byte bodies, 4 queues, 5 tags, KEYS and UNIQ_KEY set) with a
vectorised synthetic writer (valid records: the source checks magic, offsets, lengths and
BODYCRC of every one), then measures in the same run:

* decode: ``columnar.read_slice`` over every segment in this process, one core (rows/s, MB/s);
* batch: ``count()`` and a ``noop`` write through Spark, rocketmq vs Parquet holding the same
  messages (written from the source once), as seconds and as a ratio Parquet/rocketmq;
* streaming: rows/s of an ``availableNow`` query into a ``noop`` sink;
* latency: put-to-visible p50/p99 with a 0-second processing-time trigger: a thread puts a
  message every 5 ms through the engine's ``MessageStore`` (SYNC flush; store timestamp = put
  time), a ``foreachBatch`` sink records when each row arrives; the first 5 s of puts (a new
  query is slower while the JVM warms up) are not measured.

Usage::

    python bench/bench_source.py                 # N = 1,000,000 (about 2 minutes)
    python bench/bench_source.py --messages 10000000 --segment-mib 1024
    python bench/bench_source.py --skip-latency --keep /tmp/store   # reuse a store
    python bench/bench_source.py --messages 100000 --skip-batch --skip-stream \
        --conf spark.sql.streaming.pollingDelay=0   # latency only, with a Spark setting to try
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from rmq_spark.spark.columnar import DecodeSettings, read_slice  # noqa: E402
from rmq_spark.spark.offsets import SegmentSlice  # noqa: E402
from rmq_spark.store.codec import encode_blank, encode_record  # noqa: E402
from rmq_spark.store.layout import segment_name  # noqa: E402
from rmq_spark.store.message import HostAddress, MessageRecord  # noqa: E402
from rmq_spark.store.properties import encode_properties  # noqa: E402
from rmq_spark.store.view import MappedSegment, StoreView, read_confirm_offset  # noqa: E402

BODY_BYTES = 100
BASE_TS_MS = 1_700_000_000_000


# --- synthetic store -----------------------------------------------------------------------------


RECORD_CRC_BYTES = 20  # "__CRC32#" \x01 10 digits \x02 closing the properties (FORMAT.md)


def _template(record_crc: bool = False) -> tuple[bytes, dict[str, int]]:
    """One encoded record and the byte positions of the fields patched per message."""
    fields = {"TAGS": "tag@", "KEYS": "key-##########", "UNIQ_KEY": "%" * 32, "WAIT": "true"}
    if record_crc:
        fields["__CRC32#"] = "0" * 10
    props = encode_properties(fields)
    record = MessageRecord(
        topic="BenchTopic",
        body=b"\xee" * BODY_BYTES,
        properties=props,
        born_host=HostAddress("192.168.7.7", 40000),
        store_host=HostAddress("10.0.0.1", 10911),
    )
    data = encode_record(record)
    marks = {
        "tag": data.index(b"tag@") + 3,
        "key": data.index(b"##########"),
        "uniq": data.index(b"%" * 32),
        "body": data.index(b"\xee" * BODY_BYTES),
    }
    return data, marks


def _digits(values: np.ndarray, width: int, alphabet: bytes = b"0123456789") -> np.ndarray:
    """``(n, width)`` ASCII digits of ``values`` in base ``len(alphabet)``, zero-padded."""
    base = len(alphabet)
    table = np.frombuffer(alphabet, dtype=np.uint8)
    out = np.empty((len(values), width), dtype=np.uint8)
    rest = values.astype(np.int64).copy()
    for column in range(width - 1, -1, -1):
        out[:, column] = table[rest % base]
        rest //= base
    return out


def write_store(
    store_dir: Path, count: int, segment_bytes: int, seed: int = 7, record_crc: bool = False
) -> int:
    """Write ``count`` messages into a RocketMQ-layout store; returns the end offset. With
    ``record_crc`` every record carries the ``__CRC32#`` record CRC property."""
    template, marks = _template(record_crc)
    size = len(template)
    per_segment = (segment_bytes - 8) // size
    commitlog = store_dir / "commitlog"
    commitlog.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    row_template = np.frombuffer(template, dtype=np.uint8)
    written, base, end = 0, 0, 0
    while written < count:
        n = min(per_segment, count - written)
        index = np.arange(written, written + n, dtype=np.int64)
        rows = np.tile(row_template, (n, 1))
        positions = np.arange(n, dtype=np.int64) * size
        rows[:, 12:16] = (index % 4).astype(">i4").view(np.uint8).reshape(n, 4)
        rows[:, 20:28] = (index // 4).astype(">i8").view(np.uint8).reshape(n, 8)
        rows[:, 28:36] = (base + positions).astype(">i8").view(np.uint8).reshape(n, 8)
        rows[:, 40:48] = (BASE_TS_MS + index).astype(">i8").view(np.uint8).reshape(n, 8)
        rows[:, 56:64] = (BASE_TS_MS + index).astype(">i8").view(np.uint8).reshape(n, 8)
        body = marks["body"]
        rows[:, body : body + BODY_BYTES] = rng.integers(0, 256, (n, BODY_BYTES), dtype=np.uint8)
        crc = np.fromiter(
            (zlib.crc32(r) & 0x7FFFFFFF for r in rows[:, body : body + BODY_BYTES]),
            dtype=np.int64,
            count=n,
        )
        rows[:, 8:12] = crc.astype(">i4").view(np.uint8).reshape(n, 4)
        rows[:, marks["tag"]] = np.frombuffer(b"01234", np.uint8)[index % 5]
        rows[:, marks["key"] : marks["key"] + 10] = _digits(index, 10)
        rows[:, marks["uniq"] : marks["uniq"] + 32] = _digits(index, 32, b"0123456789ABCDEF")
        if record_crc:
            _stamp_record_crc(rows)
        path = commitlog / segment_name(base)
        with open(path, "wb") as f:
            f.write(rows.tobytes())
            f.write(encode_blank(segment_bytes - n * size))
            f.truncate(segment_bytes)
        written += n
        end = base + n * size
        base += segment_bytes
    checkpoint = bytearray(4096)
    struct.pack_into(">q", checkpoint, 32, end)
    (store_dir / "checkpoint").write_bytes(bytes(checkpoint))
    return end


def _stamp_record_crc(rows: np.ndarray) -> None:
    """Fill each row's record CRC digits: CRC32 & 0x7FFFFFFF of all bytes before the 20-byte
    property, in decimal, least-significant digit first, right-padded with '0'."""
    head = rows.shape[1] - RECORD_CRC_BYTES
    crc = np.fromiter(
        (zlib.crc32(r) & 0x7FFFFFFF for r in rows[:, :head]), dtype=np.int64, count=len(rows)
    )
    digits = rows[:, head + 9 : head + 19]
    text = np.array([str(value)[::-1].ljust(10, "0").encode() for value in crc.tolist()])
    digits[:] = np.frombuffer(text.tobytes(), dtype=np.uint8).reshape(len(rows), 10)


# --- measurements --------------------------------------------------------------------------------


def bench_decode(store_dir: Path) -> tuple[int, float, int]:
    """Decode every record in this process: (rows, seconds, bytes)."""
    view = StoreView.open(store_dir)
    rows, started, total = 0, time.perf_counter(), 0
    for span in view.spans:
        with MappedSegment(view.segment_path(span.base_offset)) as mapped:
            piece = SegmentSlice(span.base_offset, 0, mapped.size_bytes, mapped.size_bytes)
            for batch in read_slice(mapped.buffer, mapped.size_bytes, piece, DecodeSettings()):
                rows += batch.num_rows
                total += batch.nbytes
    return rows, time.perf_counter() - started, total


def _timed(action) -> float:  # noqa: ANN001
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def bench_batch(spark, store_dir: Path, parquet_dir: Path, repeat: int) -> dict[str, float]:  # noqa: ANN001
    """Best-of-``repeat`` seconds of count and noop, rocketmq and Parquet interleaved."""
    source = spark.read.format("rocketmq").load(str(store_dir))
    if not parquet_dir.exists():
        source.write.parquet(str(parquet_dir))
    parquet = spark.read.parquet(str(parquet_dir))
    narrow = spark.read.format("rocketmq").schema("physical_offset long").load(str(store_dir))
    frames = {"rocketmq": source, "parquet": parquet, "rocketmq_narrow": narrow}
    for df in frames.values():
        df.count()  # warm up: Python workers, page cache
    results: dict[str, float] = {}
    for _ in range(repeat):  # interleaved, so that background load hits both alike
        for name, df in frames.items():
            count = _timed(df.count)
            before = _cpu_seconds()
            noop = _timed(lambda d=df: d.write.format("noop").mode("overwrite").save())
            after = _cpu_seconds()
            if noop < results.get(f"{name}_noop", 1e9):
                results[f"{name}_noop_cpu_jvm"] = after[0] - before[0]
                results[f"{name}_noop_cpu_python"] = after[1] - before[1]
            results[f"{name}_count"] = min(results.get(f"{name}_count", 1e9), count)
            results[f"{name}_noop"] = min(results.get(f"{name}_noop", 1e9), noop)
    return results


def _cpu_seconds() -> tuple[float, float]:
    """CPU seconds used so far by this process's JVM and by its Python workers (Linux).

    Less sensitive than wall time to other jobs on the machine; 0 where /proc is missing.
    """
    tick = os.sysconf("SC_CLK_TCK")
    table: dict[int, tuple[int, int, bool]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            is_java = b"java" in (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]), is_java)
    family, grew = {os.getpid()}, True
    while grew:
        grew = False
        for pid, (parent, _, _) in table.items():
            if parent in family and pid not in family:
                family.add(pid)
                grew = True
    family.discard(os.getpid())
    jvm = sum(table[p][1] for p in family if table[p][2])
    python = sum(table[p][1] for p in family if not table[p][2])
    return jvm / tick, python / tick


def bench_stream(spark, store_dir: Path, checkpoint: Path) -> tuple[int, float, float]:  # noqa: ANN001
    """An availableNow query into a noop sink: (rows, wall seconds, seconds in triggers)."""
    query = (
        spark.readStream.format("rocketmq")
        .option("startingOffsets", "earliest")
        .load(str(store_dir))
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    started = time.perf_counter()
    running = query.start()
    running.awaitTermination()
    seconds = time.perf_counter() - started
    rows = sum(p["numInputRows"] for p in running.recentProgress)
    triggers = sum(p["durationMs"].get("triggerExecution", 0) for p in running.recentProgress)
    return rows, seconds, triggers / 1000


def _epoch_ms(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


def bench_latency(  # noqa: ANN001, PLR0913
    spark,
    work: Path,
    seconds: float,
    interval_ms: float,
    options: dict[str, str],
    warmup_seconds: float = 5.0,
) -> tuple[list[float], dict[str, float]]:
    """Put -> row-in-a-foreachBatch-sink latencies (ms) under a 0-second trigger, and the
    median ``durationMs`` parts of the micro-batches (Spark's progress).

    A thread puts a message every ``interval_ms`` through the engine's ``MessageStore`` (SYNC
    flush: acknowledged = fsynced = below confirmPhyOffset); the store timestamp of each row
    is its put time, and the sink notes when the row reached it.
    """
    from rmq_spark.store.config import FlushPolicy, StoreConfig
    from rmq_spark.store.message_store import MessageStore
    from rmq_spark.store.put import PutRequest

    name = "latency-" + "-".join(options.values())
    config = StoreConfig(
        root_dir=work / name / "store", segment_size_bytes=1 << 20, flush_policy=FlushPolicy.SYNC
    )
    store = MessageStore.open(config)
    latencies: list[float] = []

    def sink(df, batch_id: int) -> None:  # noqa: ANN001
        stamps = [r.ts for r in df.selectExpr("unix_micros(store_timestamp) ts").collect()]
        now_us = time.time_ns() // 1000
        latencies.extend((now_us - ts) / 1000 for ts in stamps)

    query = (
        spark.readStream.format("rocketmq")
        .option("startingOffsets", "latest")
        .options(**options)
        .load(str(config.root_dir))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(work / name / "ck"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    stop = threading.Event()

    def produce() -> None:
        index = 0
        while not stop.is_set():
            store.put(PutRequest(topic="Latency", body=b"x" * BODY_BYTES, tags=f"t{index}"))
            index += 1
            stop.wait(interval_ms / 1000)

    producer = threading.Thread(target=produce, daemon=True)
    try:
        # Warm-up: the first batch with rows starts the Python workers (seconds); not measured.
        store.put(PutRequest(topic="Latency", body=b"x" * BODY_BYTES, tags="warm-up"))
        query.processAllAvailable()
        producer.start()
        # The first seconds of a new query run slower (JIT, code generation): not measured.
        time.sleep(warmup_seconds)
        latencies.clear()
        warmed_at = time.time() * 1000
        time.sleep(seconds)  # a benchmark, not a test: it measures over wall-clock time
        stop.set()
        producer.join()
        query.processAllAvailable()
        progress = [
            p
            for p in query.recentProgress
            if p["numInputRows"] and _epoch_ms(p["timestamp"]) >= warmed_at
        ]
    finally:
        query.stop()
        store.close()
    parts = {
        key: statistics.median(p["durationMs"].get(key, 0) for p in progress)
        for key in (
            "triggerExecution",
            "latestOffset",
            "walCommit",
            "queryPlanning",
            "addBatch",
            "commitOffsets",
        )
    }
    return latencies, parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--segment-mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="store dir to create or reuse")
    parser.add_argument("--skip-spark", action="store_true", help="decode only, no Spark")
    parser.add_argument("--skip-batch", action="store_true", help="no count/noop vs Parquet")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-stream", action="store_true", help="no availableNow run")
    parser.add_argument(
        "--driver-read-max-bytes",
        default="4m",
        help="latency run with this driverReadMaxBytes next to the default (0: skip it)",
    )
    parser.add_argument("--latency-seconds", type=float, default=15.0)
    parser.add_argument(
        "--latency-warmup-seconds",
        type=float,
        default=5.0,
        help="puts before the measured window (a new query is slower for a few seconds)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark setting for the whole run (repeatable), e.g. to try a tuning",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra source option for the latency runs (repeatable)",
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--record-crc",
        action="store_true",
        help="every record carries the __CRC32# record CRC property (checked on read)",
    )
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="bench-source-"))
    store = args.keep or work / "store"
    try:
        if not (store / "checkpoint").exists():
            started = time.perf_counter()
            end = write_store(
                store, args.messages, args.segment_mib << 20, record_crc=args.record_crc
            )
            print(
                f"wrote {args.messages:,} messages, {end / 2**20:,.0f} MiB of log "
                f"in {time.perf_counter() - started:.1f} s"
            )
        rows, seconds, nbytes = bench_decode(store)
        log_bytes = read_confirm_offset(store)
        print(
            f"decode (1 core, in-process): {rows:,} rows in {seconds:.2f} s = "
            f"{rows / seconds:,.0f} rows/s, {log_bytes / seconds / 2**20:,.0f} MiB/s of log, "
            f"{nbytes / seconds / 2**20:,.0f} MiB/s of Arrow"
        )
        if args.skip_spark:
            return 0
        from rmq_spark.spark.config import SparkConfig
        from rmq_spark.spark.session import build_session

        extra = {"spark.pyspark.python": sys.executable} | _pairs(args.conf)
        spark = build_session(
            SparkConfig(master=args.master, shuffle_partitions=2, log_level="ERROR"),
            extra_conf=extra,
        )
        if args.conf:
            print("extra Spark settings: " + ", ".join(args.conf))
        if not args.skip_batch:
            _print_batch(
                bench_batch(spark, store, store.parent / (store.name + "-parquet"), args.repeat),
                args.messages,
            )
        if not args.skip_stream:
            rows, seconds, in_triggers = bench_stream(spark, store, work / "stream-ck")
            print(
                f"stream availableNow: {rows:,} rows in {seconds:.2f} s wall = "
                f"{rows / seconds:,.0f} rows/s ({rows / in_triggers:,.0f} rows/s inside "
                "triggers, i.e. without query start-up)"
            )
        if not args.skip_latency:
            extra_options = _pairs(args.option)
            label = ", ".join(args.option) or "default options"
            runs = {f"executors ({label})": extra_options}
            if args.driver_read_max_bytes not in ("", "0"):
                runs[f"driverReadMaxBytes={args.driver_read_max_bytes}"] = extra_options | {
                    "driverReadMaxBytes": args.driver_read_max_bytes
                }
            for label, options in runs.items():
                found, parts = bench_latency(
                    spark, work, args.latency_seconds, 5.0, options, args.latency_warmup_seconds
                )
                latencies = sorted(found)
                p50 = statistics.median(latencies)
                p99 = latencies[max(0, int(len(latencies) * 0.99) - 1)]
                print(
                    f"put-to-visible, {label} (trigger 0, SYNC puts every 5 ms, "
                    f"{len(latencies)} messages): p50 {p50:.0f} ms, p99 {p99:.0f} ms; "
                    "median batch ms: "
                    + ", ".join(f"{key} {value:.0f}" for key, value in parts.items())
                )
        spark.stop()
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _pairs(items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


def _print_batch(batch: dict[str, float], messages: int) -> None:
    print(
        "batch noop CPU seconds (JVM + Python workers): rocketmq "
        f"{batch['rocketmq_noop_cpu_jvm']:.2f} + {batch['rocketmq_noop_cpu_python']:.2f}, "
        f"parquet {batch['parquet_noop_cpu_jvm']:.2f} + {batch['parquet_noop_cpu_python']:.2f}"
    )
    for action in ("noop", "count"):
        ours, theirs = batch[f"rocketmq_{action}"], batch[f"parquet_{action}"]
        narrow = batch[f"rocketmq_narrow_{action}"]
        print(
            f"batch {action:5}: rocketmq {ours:.2f} s ({messages / ours:,.0f} rows/s), "
            f"parquet {theirs:.2f} s, ratio parquet/rocketmq {theirs / ours:.2f}; "
            f"rocketmq with schema 'physical_offset long' {narrow:.2f} s "
            f"(ratio {theirs / narrow:.2f})"
        )


if __name__ == "__main__":
    raise SystemExit(main())
