"""The reput's file work alone: a store's records decoded and the three tables' Parquet files
written in one process (``reput_files.write_partition_files`` over every partition of the
log, what the Python workers of a catch-up do), with no Spark, JVM or Delta commit. Reports
the process's CPU seconds for the whole log and per million records; ``--checkout`` runs
another source tree's code on the same store in the same run, alternating, baseline first.

The store is ``--messages`` messages of ``--body-bytes`` bytes written as the catch-up's
benchmark writes them (``bench/peers/run.py``'s ``write_rmq_store``: 4 queues, 5 tags, one
key each), kept in ``--store`` between runs.

Usage::

    flock /tmp/bench.lock .venv/bin/python bench/bench_reput_files.py [--messages 1000000]
        [--body-bytes 100] [--rounds 3] [--checkout DIR] [--store DIR] [--part writers]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Run in a fresh process of the tree under test (its PYTHONPATH): the writer's modules are
# imported and warmed first, as the reput's warm-up does on each worker, then timed.
_FILES = """
import shutil, sys, time
from pathlib import Path
from rmq_spark.spark import planner
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.partitions import open_view, plan
from rmq_spark.spark.reput_files import ReputFileTask, write_partition_files
from rmq_spark.spark.reput_start import _import_writer_modules

_import_writer_modules(None)
store, tables = Path(sys.argv[1]), Path(sys.argv[2])
options = parse_options({"path": str(store)}, streaming=True)
view = open_view(options)
partitions = plan(view, options, view.min_offset, planner.readable_end(view), [])
floors = {"messages": 0, "message_index": 0, "consume_queue": 0}
for name in floors:
    shutil.rmtree(tables / name, ignore_errors=True)
    (tables / name).mkdir(parents=True)
task = ReputFileTask(options, str(tables), floors, (1000,))
if sys.argv[3] == "all":
    started = time.process_time()
    rows = sum(write_partition_files(task, partition).messages for partition in partitions)
    print(rows, time.process_time() - started)
    sys.exit(0)
# "writers": each partition's rows decoded and derived first, untimed; then its data files.
import pyarrow as pa
from rmq_spark.spark.delta_files import DataFileWriter
from rmq_spark.spark.partitions import read_partition
from rmq_spark.spark.reput_files import DICTIONARY_COLUMNS, _rows_for, file_schema
from rmq_spark.spark.tables import table_path
derived, rows = [], 0
for partition in partitions:
    tables_rows = {name: [] for name in floors}
    for batch in read_partition(partition, options):
        rows += batch.num_rows
        for name, kept in tables_rows.items():
            kept.append(_rows_for(name, pa.Table.from_batches([batch]), task))
    derived.append(tables_rows)
started = time.process_time()
for tables_rows in derived:
    for name, kept in tables_rows.items():
        writer = DataFileWriter(
            table_path(str(tables), name), file_schema(name, task.layout), DICTIONARY_COLUMNS[name]
        )
        for table in kept:
            writer.write(table)
        writer.close()
print(rows, time.process_time() - started)
"""


def files_cpu_s(tree: Path, store: Path, tables: Path, part: str) -> tuple[int, float]:
    done = subprocess.run(
        [sys.executable, "-c", _FILES, str(store), str(tables), part],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"bench_reput_files: {tree}: {done.stderr.strip()[-2000:]}")
    rows, seconds = done.stdout.split()
    return int(rows), float(seconds)


def ensure_store(store: Path, messages: int, body_bytes: int) -> None:
    marker = store / f".bench-{messages}x{body_bytes}"
    if marker.exists():
        return
    sys.path.insert(0, str(REPO / "bench" / "peers"))
    from run import write_rmq_store

    if store.exists():
        raise SystemExit(f"bench_reput_files: {store} exists and was not written by this script")
    print(f"writing {messages:,} x {body_bytes} B into {store} ...", flush=True)
    write_rmq_store(store, messages, body_bytes)
    marker.touch()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checkout", type=Path, help="a baseline source tree (git archive)")
    parser.add_argument("--store", type=Path, help="where the store is kept between runs")
    parser.add_argument(
        "--part",
        choices=("all", "writers"),
        default="all",
        help="all: decode, derive and write (timed together); writers: the Parquet data files "
        "alone, their rows decoded and derived first, untimed",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-reput-files-"))
    try:
        return _rounds(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _rounds(args: argparse.Namespace, work: Path) -> int:
    store = args.store or work / "store"
    ensure_store(store, args.messages, args.body_bytes)
    trees = {"baseline": args.checkout, "this": REPO} if args.checkout else {"this": REPO}
    seconds: dict[str, list[float]] = {name: [] for name in trees}
    for round_no in range(1, args.rounds + 1):
        for name, tree in trees.items():
            rows, cpu_s = files_cpu_s(tree.resolve(), store, work / "tables", args.part)
            seconds[name].append(cpu_s)
            print(f"round {round_no} {name}: {rows:,} records, {cpu_s:.2f} CPU s", flush=True)
    print(f"load average: {os.getloadavg()}")
    for name, values in seconds.items():
        median = statistics.median(values)
        per_million = median / args.messages * 1e6
        print(f"{name}: median {median:.2f} CPU s ({per_million:.2f} s per million records)")
    if args.checkout:
        ratio = statistics.median(seconds["this"]) / statistics.median(seconds["baseline"])
        print(f"this / baseline: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
