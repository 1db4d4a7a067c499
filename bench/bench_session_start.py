"""Benchmark of a fresh Spark session's start and first reput catch-up, without and with the
driver JVM's class-data archive (``rmq_spark/spark/class_archive.py``), and with it on C1 only
(``driver_jit = "quick"``, the reput job's default), alternated in one run.

Each sample is a process of its own, as a job or notebook is: it builds the project's session
(``build_session``, ``local[2]``), then catches up a store of ``--messages`` x
``--body-bytes`` (the catch-up workload of ``bench/peers/run.py``) into fresh tables with an
``availableNow`` reput. "without" starts the session with the archive's option taken out of
the driver's Java options, "with" is the default session (Java's full JIT), "quick" the reput
job's (C1 only). Reported: the session's start (wall, and the driver JVM's CPU, all threads,
from ``/proc``), the catch-up's wall time and the JVM's CPU during it, as medians over
``--rounds`` and as ratios.

Usage::

    flock /tmp/bench.lock python bench/bench_session_start.py          # 1M x 1 KiB, 3 rounds
    python bench/bench_session_start.py --messages 100000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench" / "peers"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from rmq_spark.spark.class_archive import archive_path  # noqa: E402
from rmq_spark.spark.config import SparkConfig  # noqa: E402
from rmq_spark.spark.driver_jvm import driver_java_options, spark_home  # noqa: E402

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
MODES = ("without", "with", "quick")


def _process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def _session_config(mode: str) -> SparkConfig:
    config = SparkConfig(master="local[2]", shuffle_partitions=2, log_level="ERROR")
    if mode != "without":
        return replace(config, driver_jit="quick" if mode == "quick" else "full")
    options = driver_java_options(config, class_archive=False)
    return replace(config, extra_conf=(f"spark.driver.extraJavaOptions={options}",))


def _sample(mode: str, store: Path, tables: Path) -> dict[str, float]:
    """One fresh session and one catch-up, in this process."""
    from run import time_reput

    from rmq_spark.spark.session import build_session

    started = time.perf_counter()
    spark = build_session(_session_config(mode))
    session_s = time.perf_counter() - started
    jvm = spark.sparkContext._gateway.proc.pid
    session_cpu_s = _process_cpu_s(jvm)
    timing = time_reput(spark, store, tables, 512 << 20)
    catch_up_cpu_s = _process_cpu_s(jvm) - session_cpu_s
    spark.stop()
    return {
        "session_s": session_s,
        "session_jvm_cpu_s": session_cpu_s,
        "catch_up_s": timing.seconds,
        "catch_up_jvm_cpu_s": catch_up_cpu_s,
        "messages": timing.messages,
    }


def _run_sample(mode: str, store: Path, tables: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--sample", mode, "--store", str(store), "--tables",
         str(tables)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("SAMPLE ")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"a {mode} sample failed (exit {done.returncode}): {' | '.join(tail)}")
    return json.loads(lines[-1][len("SAMPLE ") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sample", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--store", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--tables", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sample:
        print("SAMPLE " + json.dumps(_sample(args.sample, args.store, args.tables)), flush=True)
        return
    path = archive_path(spark_home())
    if path is None or not path.is_file():
        raise SystemExit(f"no class-data archive at {path}: run `make setup` first")
    from run import write_rmq_store

    with tempfile.TemporaryDirectory(prefix="bench-session-start-") as scratch:
        store = Path(scratch) / "store"
        print(f"writing {args.messages:,} x {args.body_bytes} B...", flush=True)
        write_rmq_store(store, args.messages, args.body_bytes)
        samples: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        for round_number in range(args.rounds):
            for mode in MODES:
                tables = Path(scratch) / f"tables-{mode}-{round_number}"
                sample = _run_sample(mode, store, tables)
                samples[mode].append(sample)
                load = os.getloadavg()[0]
                print(f"round {round_number + 1} {mode:>7}: session {sample['session_s']:.2f} s"
                      f" (JVM {sample['session_jvm_cpu_s']:.2f} CPU s), catch-up "
                      f"{sample['catch_up_s']:.2f} s (JVM {sample['catch_up_jvm_cpu_s']:.2f} "
                      f"CPU s), load {load:.2f}", flush=True)  # fmt: skip
    _report(samples)


def _report(samples: dict[str, list[dict[str, float]]]) -> None:
    print("\n| median | without the archive | with it | with / without | with it, C1 only "
          "(quick) | quick / with |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for key, label in (
        ("session_s", "session start, s"),
        ("session_jvm_cpu_s", "session start, driver JVM CPU s"),
        ("catch_up_s", "first catch-up, s"),
        ("catch_up_jvm_cpu_s", "first catch-up, driver JVM CPU s"),
    ):
        before, after, quick = (
            statistics.median(sample[key] for sample in samples[mode]) for mode in MODES
        )
        print(f"| {label} | {before:.2f} | {after:.2f} | {after / before:.2f}x | {quick:.2f} "
              f"| {quick / after:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
