"""Write the driver JVM's class-data archive (``class_archive``): ``make setup`` runs
``python -m rmq_spark.spark.class_archive_build``.

The archive holds the classes a representative session loaded: a fresh session with the
project's settings and tables, a reput catch-up of a small store into Delta, a batch read
of the ``rocketmq`` source and SQL over the tables. That run happens in a process of its own
whose driver JVM writes the archive when it exits (``-XX:ArchiveClassesAtExit``), into a
temporary name renamed into place once the JVM has ended, so a session never maps half a
file. An archive already there for this JDK and classpath is kept; older ones are removed
(about 235 MB each). Without it sessions still work, they only start slower: ``make setup``
warns and goes on.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from rmq_spark.spark.class_archive import ARCHIVE_FOLDER, archive_path
from rmq_spark.spark.config import SparkConfig
from rmq_spark.spark.driver_jvm import driver_java_options, spark_home
from rmq_spark.spark.session import build_session

__all__ = ["build_archive", "main"]

_log = logging.getLogger("rmq_spark.class_archive")

RUN_TIMEOUT_S = 900
STORE_MESSAGES = 20_000
STORE_SEGMENT_BYTES = 64 << 20  # not RocketMQ's preallocated 1 GiB for 3 MB of messages


def build_archive(*, force: bool = False) -> Path | None:
    """Write this Spark's archive unless it exists (``force``: write it again); its path, or
    ``None`` without a Java. Raises ``RuntimeError`` naming the run's failure."""
    home = spark_home()
    target = archive_path(home)
    if target is None:
        return None
    if target.is_file() and not force:
        _log.info("class-data archive up to date: %s", target)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    started = time.monotonic()
    _log.info("writing the driver JVM's class-data archive (a short Spark run)...")
    done = subprocess.run(
        [sys.executable, "-m", "rmq_spark.spark.class_archive_build", "--dump-into", str(partial)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"the archive's run failed (exit {done.returncode}): {last[0]}")
    os.replace(partial, target)
    for stale in target.parent.glob("*.jsa"):
        if stale != target:
            stale.unlink(missing_ok=True)
    size_mb = target.stat().st_size / 1e6
    _log.info("wrote %s (%.0f MB) in %.0f s", target, size_mb, time.monotonic() - started)
    return target


def _dump_into(path: Path) -> None:
    """The representative run, in this process; its driver JVM writes ``path`` as it ends."""
    with tempfile.TemporaryDirectory(prefix="rmq-class-archive-") as scratch:
        store, tables = Path(scratch) / "store", Path(scratch) / "tables"
        _write_store(store)
        config = SparkConfig(master="local[2]", shuffle_partitions=2, log_level="ERROR")
        options = driver_java_options(config, class_archive=False)
        extra = f"spark.driver.extraJavaOptions={options} -XX:ArchiveClassesAtExit={path}"
        spark = build_session(replace(config, extra_conf=(extra,)), tables_dir=tables)
        _run_workload(spark, store, tables)
        _stop_and_wait(spark)


def _write_store(store: Path) -> None:
    from rmq_spark.store.config import FlushPolicy, StoreConfig
    from rmq_spark.store.message_store import MessageStore
    from rmq_spark.store.put import PutRequest

    config = StoreConfig(
        root_dir=store, flush_policy=FlushPolicy.ASYNC, segment_size_bytes=STORE_SEGMENT_BYTES
    )
    with MessageStore.open(config) as message_store:
        message_store.put_batch(
            [
                PutRequest(
                    "ArchiveTopic",
                    b"x" * 100,
                    queue_id=index % 4,
                    tags=f"tag{index % 5}",
                    keys=(f"key-{index}",),
                )
                for index in range(STORE_MESSAGES)
            ]
        )


def _run_workload(spark, store: Path, tables: Path) -> None:  # noqa: ANN001
    from rmq_spark.spark.reput import run_reput
    from rmq_spark.spark.reput_config import ReputConfig
    from rmq_spark.store.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_message_delay_level

    levels = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)
    run_reput(spark, store, ReputConfig(tables_dir=tables, available_now=True), levels)
    spark.read.format("rocketmq").load(str(store)).where("tags = 'tag1'").count()
    spark.sql("SELECT tags, count(*) FROM rmq.messages GROUP BY tags").collect()


def _stop_and_wait(spark) -> None:  # noqa: ANN001
    """Stop the session and wait for its JVM to end: it writes the archive on its way out.
    The gateway JVM ends when its stdin closes (PySpark's own rule for a driver gone)."""
    process = getattr(spark.sparkContext._gateway, "proc", None)
    spark.stop()
    if process is None:
        raise RuntimeError("the session's JVM was not started by this process")
    process.stdin.close()
    process.wait(timeout=RUN_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rmq_spark.spark.class_archive_build",
        description=(
            "Write the Spark driver's class-data archive for this JDK and Spark "
            f"(<spark home>/{ARCHIVE_FOLDER}/): sessions then start ~2 s sooner. "
            "Kept when one is already there."
        ),
    )
    parser.add_argument("--force", action="store_true", help="write it again even if present")
    parser.add_argument("--dump-into", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    if args.dump_into is not None:
        _dump_into(args.dump_into)
        return 0
    try:
        target = build_archive(force=args.force)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
        print(f"class-data archive not written: {err}", file=sys.stderr)
        return 1
    if target is None:
        print("class-data archive not written: no Java found", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
