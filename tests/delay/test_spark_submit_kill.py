"""SIGKILL the real ``spark-submit jobs/schedule.py`` job while it redelivers from the
consume_queue table, restart it with ``--once``: every message lands exactly once, none early.

The reput job (in this test's SparkSession) indexes 20,000 delayed messages first; the job
then needs several batches (one Spark query each) to redeliver them, and is killed as soon as
the journal shows the first batch committed. Waits poll files with deadlines.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from delay_world import store_config

from rmq_spark.broker.embedded import Broker
from rmq_spark.clock import SystemClock
from rmq_spark.delay.log_reader import LogReader
from rmq_spark.spark.reput import run_reput
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.store.delay_levels import delivery_time_ms, parse_message_delay_level
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC
from rmq_spark.store.properties import delay_level_of, parse_properties
from rmq_spark.store.put import PutRequest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
LEVELS = "1s 2s 3s"
MESSAGES = 20_000


def spark_submit(root: Path, tables: Path, *mode: str) -> subprocess.Popen[bytes]:
    command = [
        str(Path(sys.executable).with_name("spark-submit")),
        "--master",
        "local[1]",
        str(REPO / "jobs" / "schedule.py"),
        "--store",
        str(root),
        "--tables",
        str(tables),
        *mode,
        "--set",
        f"store.message_delay_level={LEVELS}",
        "--set",
        "store.flush_policy=ASYNC",
        "--set",
        "store.segment_size_bytes=1048576",
        "--set",
        "delay.entry_source=CONSUME_QUEUE",
    ]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    log = (root.parent / "schedule-job.log").open("ab")
    return subprocess.Popen(command, stdout=log, stderr=log, env=env, start_new_session=True)


def level_progress(root: Path) -> tuple[int, bool]:
    """Level messages recorded done, and whether a batch is in flight (an intent)."""
    path = root / "config" / "scheduleJournal.json"
    if not path.exists():
        return 0, False
    journal = json.loads(path.read_text())  # replaced atomically: never half written
    return sum(q["low_water"] for q in journal["levels"].values()), journal["intent"] is not None


def test_a_killed_spark_submit_job_resumes_exactly_once(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root, tables = tmp_path / "store", tmp_path / "tables"
    clock = SystemClock()
    with Broker(
        root, store_config=store_config(root, message_delay_level=LEVELS), clock=clock
    ) as b:
        for start in range(0, MESSAGES, 5000):
            requests = [
                PutRequest(
                    topic="orders",
                    queue_id=i % 4,
                    body=f"m{i}".encode(),
                    properties={"DELAY": str(1 + i % 3), "UNIQ_KEY": f"K{i:05d}"},
                )
                for i in range(start, start + 5000)
            ]
            assert all(r.ok for r in b.store.put_batch(requests))
        b.store.flush()
    reput_config = ReputConfig(tables_dir=tables, available_now=True, database="rmq_kill_test")
    run_reput(spark, root, reput_config, parse_message_delay_level(LEVELS))

    job = spark_submit(root, tables, "--trigger", "200ms")
    deadline = time.monotonic() + 300
    try:
        # Kill inside the second (or a later) batch: after its intent, before its commit.
        while True:
            done, in_flight = level_progress(root)
            if (done and in_flight) or done >= MESSAGES // 2:
                break
            assert job.poll() is None, "the job ended early; see schedule-job.log"
            assert time.monotonic() < deadline, "no batch committed in time"
            time.sleep(0.01)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=60)
    at_kill, in_flight = level_progress(root)
    assert 0 < at_kill < MESSAGES, at_kill

    again = spark_submit(root, tables, "--once")
    assert again.wait(timeout=300) == 0, "see schedule-job.log"
    log_lines = (tmp_path / "schedule-job.log").read_text(errors="replace").splitlines()
    summary = json.loads(next(line for line in log_lines if line.startswith('{"schedule"')))
    if in_flight:  # the batch killed in flight was settled: found in the log or put again
        assert summary["settled_found"] + summary["settled_put"] > 0, summary

    levels_ms = parse_message_delay_level(LEVELS)
    with LogReader(root) as reader:
        stored = {
            parse_properties(s.record.properties)["UNIQ_KEY"]: s.record.store_timestamp_ms
            for s in reader.scan(0, {RMQ_SYS_SCHEDULE_TOPIC}, with_body=False)
        }
        delivered = [s.record for s in reader.scan(0, {"orders"}, with_body=False)]
    keys = collections.Counter(parse_properties(r.properties)["UNIQ_KEY"] for r in delivered)
    assert len(keys) == MESSAGES and max(keys.values()) == 1
    for record in delivered:
        props = parse_properties(record.properties)
        due = delivery_time_ms(stored[props["UNIQ_KEY"]], delay_level_of(props), levels_ms)
        assert record.store_timestamp_ms >= due
    print(f"killed with {at_kill} of {MESSAGES} recorded done, a batch in flight: {in_flight}")
    print(f"restart: {summary}")
