"""Benchmark of the reput tables' Delta checkpoint: delta-rs's (what the job writes beside the
stream) next to Delta's own ``DeltaLog.checkpoint`` (what it wrote before), on copies of the
same tables in one run.

Builds ``consume_queue``, ``message_index`` and ``messages`` with an ``availableNow`` reput of
``--messages`` messages cut into ``--batches`` micro-batches (one Delta commit per table each,
no checkpoint: the state a running job has at its first checkpoint interval), then, for each
of ``--rounds`` rounds, checkpoints a fresh copy of the three tables each way. Reported per
checkpoint of the three tables: wall time and CPU time of both processes (the Spark driver's
JVM and this Python process, all threads, from ``/proc/<pid>/stat``), the first round apart
(a JVM's first Delta checkpoint costs more than a later one), and the ratio delta-rs / Delta.

Usage::

    flock /tmp/bench.lock python bench/bench_checkpoint.py            # 200 batches, 3 rounds
    python bench/bench_checkpoint.py --batches 400 --rounds 5
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from bench_source import write_store  # noqa: E402

from rmq_spark.spark.config import SparkConfig  # noqa: E402
from rmq_spark.spark.reput import run_reput  # noqa: E402
from rmq_spark.spark.reput_config import ReputConfig  # noqa: E402
from rmq_spark.spark.session import build_session  # noqa: E402
from rmq_spark.spark.tables import TABLE_NAMES, checkpoint_tables, table_path  # noqa: E402
from rmq_spark.store.delay_levels import (  # noqa: E402
    DEFAULT_MESSAGE_DELAY_LEVEL,
    parse_message_delay_level,
)

LEVELS = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """utime + stime of every thread of ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def _build_tables(spark, work: Path, messages: int, batches: int) -> Path:  # noqa: ANN001
    store, tables = work / "store", work / "tables"
    end = write_store(store, messages, 1 << 30)
    config = ReputConfig(
        tables_dir=tables,
        available_now=True,
        max_bytes_per_trigger=end // batches + 1,
        optimize_interval_batches=0,
        checkpoint_interval_batches=batches + 1,  # none while building
    )
    started = time.perf_counter()
    writer = run_reput(spark, store, config, LEVELS)
    print(
        f"tables: {writer.messages_written} messages in {writer.batches_written} commits per "
        f"table, built in {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return tables


def _delta_checkpoint(spark) -> Callable[[Path], None]:  # noqa: ANN001
    def checkpoint(tables: Path) -> None:
        for name in TABLE_NAMES:
            delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
                spark._jsparkSession, str(table_path(tables, name))
            )
            delta_log.checkpoint()

    return checkpoint


def _timed(checkpoint: Callable[[Path], None], tables: Path, jvm_pid: int) -> tuple[float, float]:
    """(wall s, CPU s of the JVM and this process) of one checkpoint of the three tables."""
    cpu_before = process_cpu_s(jvm_pid) + process_cpu_s(os.getpid())
    started = time.perf_counter()
    checkpoint(tables)
    wall = time.perf_counter() - started
    return wall, process_cpu_s(jvm_pid) + process_cpu_s(os.getpid()) - cpu_before


def _report(name: str, samples: list[tuple[float, float]]) -> tuple[float, float]:
    first, rest = samples[0], samples[1:] or samples
    wall = statistics.median(s[0] for s in rest)
    cpu = statistics.median(s[1] for s in rest)
    print(
        f"{name:>22}: first {first[0] * 1000:8.0f} ms wall {first[1] * 1000:8.0f} ms CPU; "
        f"later (median of {len(rest)}) {wall * 1000:8.0f} ms wall {cpu * 1000:8.0f} ms CPU",
        flush=True,
    )
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=40_000, help="messages (40,000)")
    parser.add_argument("--batches", type=int, default=200, help="commits per table (200)")
    parser.add_argument("--rounds", type=int, default=3, help="checkpoints each way (3)")
    args = parser.parse_args(argv)
    if args.messages < args.batches or args.batches < 1 or args.rounds < 1:
        parser.error("--messages >= --batches >= 1 and --rounds >= 1")
    logging.basicConfig(level=logging.WARNING)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    spark = build_session(
        SparkConfig(master="local[2]", app_name="bench-checkpoint", ui_enabled=False,
                    log_level="ERROR")
    )  # fmt: skip
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    work = Path(tempfile.mkdtemp(prefix="bench-checkpoint-"))
    try:
        built = _build_tables(spark, work, args.messages, args.batches)
        ways = {"Delta (DeltaLog)": _delta_checkpoint(spark), "delta-rs": checkpoint_tables}
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        for round_ in range(args.rounds):
            for name, checkpoint in ways.items():
                copy = work / f"copy-{round_}-{len(samples[name])}-{name[:5]}"
                shutil.copytree(built, copy)
                samples[name].append(_timed(checkpoint, copy, jvm_pid))
        delta = _report("Delta (DeltaLog)", samples["Delta (DeltaLog)"])
        rs = _report("delta-rs", samples["delta-rs"])
        print(f"delta-rs / Delta, later checkpoints: wall {rs[0] / delta[0]:.3f}x, "
              f"CPU {rs[1] / delta[1]:.3f}x", flush=True)  # fmt: skip
        print(f"load average at end: {os.getloadavg()}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
