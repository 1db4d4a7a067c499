"""Benchmark: ``rmq-spark query --key`` (RocketMQ's queryMsgByKey) on a store of N messages.

Writes a synthetic store (``bench_source.write_store``: one topic, KEYS ``key-NNNNNNNNNN``
and a UNIQ_KEY per message), runs the reput job over it (``availableNow``, the job's defaults),
then times, for keys spread over the log:

* ``rmq-spark query --tables T --topic BenchTopic --key K`` as a user runs it: a new process,
  JVM-free (``spark/query_local.py``: deltalake + pyarrow), start-up included;
* the same lookup in-process (``local_messages_by_key``), start-up excluded;
* the Spark lookup (``query.messages_by_key``, what the CLI ran before): in a new process
  with its SparkSession start (what a CLI call cost), and in a warm session.

Usage::

    flock /tmp/bench.lock python bench/bench_query.py                 # 1,000,000 messages
    flock /tmp/bench.lock python bench/bench_query.py --messages 100000 --keys 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from bench_source import write_store  # noqa: E402

from rmq_spark.spark.config import SparkConfig  # noqa: E402
from rmq_spark.spark.query import messages_by_key  # noqa: E402
from rmq_spark.spark.query_local import local_messages_by_key  # noqa: E402
from rmq_spark.spark.reput import run_reput  # noqa: E402
from rmq_spark.spark.reput_config import ReputConfig  # noqa: E402
from rmq_spark.spark.session import build_session  # noqa: E402
from rmq_spark.store.delay_levels import (  # noqa: E402
    DEFAULT_MESSAGE_DELAY_LEVEL,
    parse_message_delay_level,
)

TOPIC = "BenchTopic"
SPARK_LOOKUP = """
import sys, time
from rmq_spark.spark.config import SparkConfig
from rmq_spark.spark.query import messages_by_key
from rmq_spark.spark.session import build_session
spark = build_session(SparkConfig(master="local[2]", log_level="ERROR"))
rows = messages_by_key(spark, sys.argv[1], "BenchTopic", sys.argv[2]).collect()
assert len(rows) == 1, rows
"""


def _key(index: int) -> str:
    return f"key-{index:010d}"


def _timed(fn) -> float:  # noqa: ANN001
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{command[:4]}... failed: {done.stderr[-500:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=5, help="lookups per case")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-query-"))
    try:
        store, tables = work / "store", work / "tables"
        write_store(store, args.messages, 1 << 30)
        spark = build_session(SparkConfig(master="local[2]", log_level="ERROR"))
        config = ReputConfig(tables_dir=tables, available_now=True)
        levels = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)
        reput_s = _timed(lambda: run_reput(spark, store, config, levels))
        print(f"load {os.getloadavg()[0]:.2f}; {args.messages:,} messages; reput {reput_s:.1f} s")
        keys = [_key(i * (args.messages - 1) // max(1, args.keys - 1)) for i in range(args.keys)]
        cli = [sys.executable, "-m", "rmq_spark.cli.main", "query", "--tables", str(tables),
               "--topic", TOPIC, "--no-body", "--key"]  # fmt: skip
        cases = {
            "rmq-spark query --key (new process, no JVM)": lambda k: _run([*cli, k]),
            "local_messages_by_key, in process": lambda k: local_messages_by_key(tables, TOPIC, k),
            "Spark messages_by_key, new process + session": lambda k: _run(
                [sys.executable, "-c", SPARK_LOOKUP, str(tables), k]
            ),
            "Spark messages_by_key, warm session": lambda k: messages_by_key(
                spark, tables, TOPIC, k
            ).collect(),
        }
        print(f"| lookup of one key, {args.keys} keys spread over the log | median s | max s |")
        print("|---|---|---|")
        for name, case in cases.items():
            seconds = [_timed(lambda k=k, case=case: case(k)) for k in keys]
            print(f"| {name} | {statistics.median(seconds):.3f} | {max(seconds):.3f} |")
        print(f"load {os.getloadavg()[0]:.2f}")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
