"""Chaos: SIGKILL the redelivery job at 20 random moments while it redelivers 10,000
delayed and timer messages; restart it each time. In the end every message is in its real
topic exactly once and none was stored before its due time.

The killed process is ``chaos_job.py``: a plain Python process running the same pass as the
Spark job (spark-submit start-up would make 20 kills take far too long); one kill of the real
spark-submit job is in ``test_spark_submit_kill.py``. Real time: the job and the store use the
system clock; the test waits by polling the log with a deadline, never by sleeping to a due
time.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from delay_world import store_config

from rmq_spark.broker.embedded import Broker
from rmq_spark.broker.schedule_records import timer_due_ms
from rmq_spark.clock import SystemClock
from rmq_spark.delay.log_reader import LogReader
from rmq_spark.store.delay_levels import delivery_time_ms, parse_message_delay_level
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC
from rmq_spark.store.properties import delay_level_of, parse_properties
from rmq_spark.store.put import PutRequest

pytestmark = pytest.mark.slow

LEVELS = "2s 4s 6s 8s 10s 12s 14s 16s"
LEVEL_MESSAGES = 9000
TIMER_MESSAGES = 1000
KILLS = 20
JOB = Path(__file__).with_name("chaos_job.py")


def spawn(root: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.Popen(
        [sys.executable, str(JOB), str(root), LEVELS, "50", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def delivered_count(root: Path) -> int:
    with LogReader(root) as reader:
        return sum(1 for _ in reader.scan(0, {"orders"}, with_body=False))


def test_sigkill_at_random_moments_delivers_each_message_exactly_once_never_early(
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("CHAOS_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    print(f"chaos seed {seed} (CHAOS_SEED={seed} repeats this run)")
    root = tmp_path / "store"
    clock = SystemClock()
    with Broker(
        root, store_config=store_config(root, message_delay_level=LEVELS), clock=clock
    ) as b:
        for start in range(0, LEVEL_MESSAGES, 1000):
            requests = [
                PutRequest(
                    topic="orders",
                    queue_id=i % 4,
                    body=f"m{i}".encode(),
                    properties={"DELAY": str(1 + i % 8), "UNIQ_KEY": f"L{i:05d}"},
                )
                for i in range(start, start + 1000)
            ]
            assert all(r.ok for r in b.store.put_batch(requests))
        now_ms = clock.now_ms()
        for i in range(TIMER_MESSAGES):
            deliver_ms = now_ms + rng.randint(1000, 17_000)
            outcome = b.send("orders", f"t{i}".encode(), delivery_timestamp_ms=deliver_ms,
                             message_id=f"T{i:05d}")  # fmt: skip
            assert outcome.ok

    inside_batch = 0
    progress_at_kill, ready_s = [], []
    for _ in range(KILLS):
        spawned = time.monotonic()
        job = spawn(root)
        assert job.stdout is not None
        assert job.stdout.readline().strip() == "ready"
        ready_s.append(round(time.monotonic() - spawned, 1))
        time.sleep(rng.uniform(0.0, 0.6))  # a random moment, not a due time
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=30)
        path = root / "config" / "scheduleJournal.json"
        journal = json.loads(path.read_text()) if path.exists() else {"intent": None, "levels": {}}
        inside_batch += journal["intent"] is not None
        progress_at_kill.append(sum(q["low_water"] for q in journal["levels"].values()))
    print(f"kills inside a batch: {inside_batch}/{KILLS}; level progress: {progress_at_kill}")
    print(f"seconds from start to ready: {ready_s}")
    assert progress_at_kill[0] < LEVEL_MESSAGES  # the kills began before the work was done

    job = spawn(root)
    assert job.stdout is not None
    # Its SIGTERM handler is installed before "ready": a stop sent earlier would kill it.
    assert job.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 120
    try:
        while delivered_count(root) < LEVEL_MESSAGES + TIMER_MESSAGES:
            assert time.monotonic() < deadline, "not everything was delivered in time"
            time.sleep(0.5)
    finally:
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=30) == 0

    levels_ms = parse_message_delay_level(LEVELS)
    with LogReader(root) as reader:
        schedule = {
            parse_properties(s.record.properties)["UNIQ_KEY"]: s.record
            for s in reader.scan(0, {RMQ_SYS_SCHEDULE_TOPIC}, with_body=False)
        }
        delivered = [s.record for s in reader.scan(0, {"orders"})]
    keys = collections.Counter(parse_properties(r.properties)["UNIQ_KEY"] for r in delivered)
    duplicates = {key: n for key, n in keys.items() if n > 1}
    assert not duplicates, f"delivered more than once: {sorted(duplicates)[:10]}"
    assert len(keys) == LEVEL_MESSAGES + TIMER_MESSAGES
    early, lateness = [], []
    for record in delivered:
        props = parse_properties(record.properties)
        if props["UNIQ_KEY"].startswith("L"):
            origin = schedule[props["UNIQ_KEY"]]
            due = delivery_time_ms(origin.store_timestamp_ms, delay_level_of(props), levels_ms)
        else:
            due = timer_due_ms(props, 0)
        lateness.append(record.store_timestamp_ms - due)
        if record.store_timestamp_ms < due:
            early.append(props["UNIQ_KEY"])
    assert not early, f"delivered early: {early[:10]}"
    lateness.sort()
    print(f"lateness p50 {lateness[len(lateness) // 2]} ms, max {lateness[-1]} ms")
