"""Benchmark of the ``rocketmq`` Spark sink: rows/s into a store, embedded and through a broker.

Writes N rows (``--body-bytes`` bodies, one topic, a tag) and measures, in the same run and
under the same flush policy (``--flush``, SYNC by default as conf/rmq.toml):

* put_batch: the embedded store's ``MessageStore.put_batch``, ``--batch`` idempotent requests
  with a UNIQ_KEY each (what the embedded sink asks of the store per batch), one thread;
* send --stdin: ``rmq-spark send --stdin`` (one put per line) over ``--send-rows`` lines;
* sink embedded: ``df.write.format("rocketmq").save(store)`` of ``spark.range(N)`` with
  ``--partitions`` partitions (tasks take turns on the store's lock), wall time of the write;
* sink via broker: the same DataFrame with ``option("brokers", ...)`` into an ``rmq-spark
  broker`` subprocess on a fresh store (gRPC ``SendMessage`` requests, a few in flight).

Each result is one line ``<name>: <rows> rows in <s> s = <rows/s> rows/s``. The Spark lines
exclude session start-up; the first sink write of the run also pays Python worker start-up,
so each sink write runs ``--repeat`` times (fresh store each time) and the best is printed.

Usage (alone on the machine: the lead's runs take the bench lock exclusively)::

    flock /tmp/bench.lock python bench/bench_sink.py                 # N = 200,000
    flock /tmp/bench.lock python bench/bench_sink.py --rows 20000 --repeat 1 --flush ASYNC
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from rmq_spark.store.config import FlushPolicy, StoreConfig  # noqa: E402
from rmq_spark.store.message_store import MessageStore  # noqa: E402
from rmq_spark.store.put import PutRequest  # noqa: E402

TOPIC = "BenchSink"
SEGMENT_BYTES = 256 << 20


def _line(name: str, rows: int, seconds: float, extra: str = "") -> None:
    print(f"{name}: {rows:,} rows in {seconds:.2f} s = {rows / seconds:,.0f} rows/s{extra}")


def bench_put_batch(root: Path, rows: int, body: bytes, batch: int, flush: str) -> float:
    config = StoreConfig(
        root_dir=root, segment_size_bytes=SEGMENT_BYTES, flush_policy=FlushPolicy[flush]
    )
    with MessageStore.open(config) as store:
        started = time.perf_counter()
        for start in range(0, rows, batch):
            requests = [
                PutRequest(
                    TOPIC,
                    body,
                    tags="T",
                    properties={"UNIQ_KEY": f"bench-0-0-{i}"},
                    idempotent=True,
                )
                for i in range(start, min(rows, start + batch))
            ]
            results = store.put_batch(requests)
            if not all(r.ok for r in results):
                raise SystemExit(f"put_batch failed: {results[0]}")
        return time.perf_counter() - started


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("rmq-spark")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rmq_spark.cli.main"]


def _settings(flush: str) -> list[str]:
    return [
        "--set",
        f"store.flush_policy={flush}",
        "--set",
        f"store.segment_size_bytes={SEGMENT_BYTES}",
    ]


def bench_send_stdin(root: Path, rows: int, body: bytes, flush: str) -> float:
    lines = (body.decode("latin-1").replace("\n", " ") + "\n") * rows
    command = [*_cli(), "send", "--create", "--store", str(root), "--topic", TOPIC, "--tags", "T",
               "--stdin"]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(
        [*command, *_settings(flush)], input=lines.encode("latin-1"), capture_output=True
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"rmq-spark send failed: {done.stderr.decode(errors='replace')[-2000:]}")
    return seconds


def _frame(spark: object, rows: int, partitions: int, body_bytes: int) -> object:
    return spark.range(rows, numPartitions=partitions).selectExpr(  # type: ignore[attr-defined]
        f"'{TOPIC}' AS topic", f"repeat('x', {body_bytes}) AS body", "'T' AS tags"
    )


def bench_sink(df: object, options: dict[str, str]) -> float:
    writer = df.write.format("rocketmq").mode("append")  # type: ignore[attr-defined]
    for key, value in options.items():
        writer = writer.option(key, value)
    started = time.perf_counter()
    writer.save()
    return time.perf_counter() - started


def start_broker(root: Path, work: Path, flush: str) -> tuple[subprocess.Popen[bytes], str]:
    ready = work / f"ready-{time.monotonic_ns()}"
    command = [*_cli(), "broker", "--store", str(root), "--listen", "127.0.0.1:0"]
    command += ["--ready-file", str(ready), *_settings(flush)]
    log = (work / "broker.log").open("ab")
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while not (ready.exists() and ready.read_text().endswith("\n")):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the broker did not start; see {work / 'broker.log'}")
        time.sleep(0.05)
    return proc, ready.read_text().strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--send-rows", type=int, default=20_000, help="rows for send --stdin")
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--batch", type=int, default=512, help="put_batch size; sink batchMessages")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2, help="sink writes per destination")
    parser.add_argument("--flush", choices=("SYNC", "ASYNC"), default="SYNC")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--skip-broker", action="store_true")
    args = parser.parse_args(argv)
    body = b"x" * args.body_bytes
    work = Path(tempfile.mkdtemp(prefix="bench-sink-"))
    try:
        print(f"flush {args.flush}, {args.body_bytes}-byte bodies, batches of {args.batch}")
        seconds = bench_put_batch(work / "put-batch", args.rows, body, args.batch, args.flush)
        _line("embedded put_batch (1 thread)", args.rows, seconds)
        seconds = bench_send_stdin(work / "send", args.send_rows, body, args.flush)
        _line("rmq-spark send --stdin (process start included)", args.send_rows, seconds)

        from rmq_spark.spark.config import SparkConfig
        from rmq_spark.spark.session import build_session
        from rmq_spark.spark.source import register

        spark = build_session(
            SparkConfig(master=args.master, shuffle_partitions=2, log_level="ERROR")
        )
        register(spark)
        df = _frame(spark, args.rows, args.partitions, args.body_bytes).cache()  # type: ignore[attr-defined]
        df.count()
        common = {"batchMessages": str(args.batch)}
        best = min(
            bench_sink(
                df,
                common
                | {
                    "path": str(work / f"sink-{run}"),
                    "store.flush_policy": args.flush,
                    "store.segment_size_bytes": str(SEGMENT_BYTES),
                },
            )
            for run in range(args.repeat)
        )
        _line(f"sink embedded ({args.partitions} partitions, {args.master})", args.rows, best)
        if not args.skip_broker:
            times = []
            for run in range(args.repeat):
                proc, address = start_broker(work / f"broker-{run}", work, args.flush)
                try:
                    times.append(bench_sink(df, common | {"brokers": address}))
                finally:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=60)
            _line(f"sink via broker ({args.partitions} partitions, gRPC)", args.rows, min(times))
        spark.stop()
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
