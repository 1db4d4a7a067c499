"""Benchmark of a Delta commit's cost against the size of the table's ``_delta_log``, and of
the reput's removal of expired log files (``rmq_spark/spark/delta_log_retention.py``).

Delta lists the whole ``_delta_log`` directory of a local table on every snapshot update. A
reput table gains four files a version (the commit, Delta's checksum, Hadoop's hidden checksum
of each) at up to two versions a second. For each ``--versions`` N this builds a table whose log
holds N older versions' files below a checkpoint (commit entries with only their commitInfo:
a snapshot update lists them and reads none of them, as it does a real table's), then times
``--appends`` blind appends through Spark (wall and CPU of the driver's JVM, all threads, from
``/proc``), the first five apart, after a round that warms the JVM up. N = 0 is the baseline
of the same run. Then, with those files made older than the retention, the checkpoint the
reput's maintenance writes (``checkpoint_tables``) removes them, and the appends are timed
again.

Usage::

    flock /tmp/bench.lock python bench/bench_delta_log.py                 # 0, 1200, 3600, 7200
    python bench/bench_delta_log.py --versions 0,1200 --appends 15
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from bench_checkpoint import process_cpu_s  # noqa: E402

from rmq_spark.spark.session import build_session  # noqa: E402
from rmq_spark.spark.tables import checkpoint_tables, table_path  # noqa: E402

_WARM_APPENDS = 5
_RETENTION_S = 600.0


def _add_old_versions(log_dir: Path, count: int) -> None:
    """``count`` versions' files, numbered after the table's own, as Spark on a local file
    system writes them; the table's checkpoint then covers them."""
    start = 1 + max(int(p.name[:20]) for p in log_dir.glob("*.json"))
    entry = json.dumps({"commitInfo": {"timestamp": 0, "operation": "WRITE"}}) + "\n"
    for version in range(start, start + count):
        name = f"{version:020d}"
        for file_name in (f"{name}.json", f"{name}.crc", f".{name}.json.crc", f".{name}.crc.crc"):
            (log_dir / file_name).write_text(entry)


def _make_old(log_dir: Path, age_s: float) -> None:
    """Every file of ``log_dir`` written ``age_s`` ago (as a stream's older versions were)."""
    then = time.time() - age_s
    for path in log_dir.iterdir():
        os.utime(path, (then, then))


def _timed_appends(spark, path: Path, appends: int, jvm_pid: int) -> tuple[float, float]:  # noqa: ANN001
    """Median wall ms and mean JVM CPU ms of the appends after the first five."""
    rows = spark.range(5).withColumnRenamed("id", "physical_offset")
    walls, cpus = [], []
    for index in range(appends + _WARM_APPENDS):
        cpu, start = process_cpu_s(jvm_pid), time.perf_counter()
        rows.write.format("delta").mode("append").save(str(path))
        if index >= _WARM_APPENDS:
            walls.append((time.perf_counter() - start) * 1000)
            cpus.append((process_cpu_s(jvm_pid) - cpu) * 1000)
    return statistics.median(walls), statistics.fmean(cpus)


def _one_size(spark, work: Path, versions: int, appends: int, jvm_pid: int) -> dict:  # noqa: ANN001
    path = table_path(work, "messages")
    shutil.rmtree(work, ignore_errors=True)
    spark.sql(
        f"CREATE TABLE delta.`{path}` (physical_offset BIGINT) USING delta "
        "TBLPROPERTIES ('delta.checkpointInterval' = '1000000')"
    )
    log_dir = path / "_delta_log"
    _add_old_versions(log_dir, versions)
    checkpoint_tables(work)  # no retention: every version stays
    files = len(os.listdir(log_dir))
    wall_ms, cpu_ms = _timed_appends(spark, path, appends, jvm_pid)
    result = {"versions": versions, "files": files, "wall_ms": wall_ms, "jvm_cpu_ms": cpu_ms}
    if versions:
        _make_old(log_dir, _RETENTION_S * 2)
        start = time.perf_counter()
        checkpoint_tables(work, _RETENTION_S)
        result["checkpoint_and_cleanup_ms"] = (time.perf_counter() - start) * 1000
        result["files_after"] = len(os.listdir(log_dir))
        result["wall_after_ms"], result["jvm_cpu_after_ms"] = _timed_appends(
            spark, path, appends, jvm_pid
        )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--versions",
        default="0,1200,3600,7200",
        help="older versions in the log, comma-separated (0,1200,3600,7200: none, and a "
        "stream's 10, 30 and 60 minutes at two versions a second)",
    )
    parser.add_argument("--appends", type=int, default=20, help="timed appends per size (20)")
    args = parser.parse_args(argv)
    sizes = [int(value) for value in args.versions.split(",")]
    print(f"load average at start: {os.getloadavg()}", flush=True)
    spark = build_session(master="local[2]", app_name="bench-delta-log")
    spark.sparkContext.setLogLevel("ERROR")
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-delta-log-") as tmp:
        _one_size(spark, Path(tmp) / "tables", 0, args.appends, jvm_pid)  # the JVM warms up
        for versions in sizes:
            result = _one_size(spark, Path(tmp) / "tables", versions, args.appends, jvm_pid)
            results.append(result)
            print(json.dumps(result), flush=True)
    base = next((r for r in results if r["versions"] == 0), None)
    print(
        "| older versions | log files | append: median wall, JVM CPU | vs none |"
        " after cleanup: files, wall, JVM CPU |"
    )
    print("|---|---|---|---|---|")
    for r in results:
        ratio = f"{r['wall_ms'] / base['wall_ms']:.2f}x" if base else ""
        after = ""
        if "files_after" in r:
            after = (
                f"{r['files_after']}, {r['wall_after_ms']:.0f} ms, {r['jvm_cpu_after_ms']:.0f} ms"
            )
        print(
            f"| {r['versions']:,} | {r['files']:,} | {r['wall_ms']:.0f} ms, "
            f"{r['jvm_cpu_ms']:.0f} ms | {ratio} | {after} |"
        )
    print(f"load average at end: {os.getloadavg()}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
