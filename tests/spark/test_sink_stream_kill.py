"""writeStream.format("rocketmq") killed with SIGKILL in the middle of a micro-batch and
restarted from the same checkpoint: every one of 100,000 rows is stored exactly once (by
UNIQ_KEY and body), into a store (embedded) and through a broker process.

The query runs in a subprocess (tests/spark/sink_stream_job.py) in its own session; it is
killed once a batch is planned but not committed and some of its rows are stored already,
so the restart replays that batch and the idempotency window must drop the repeats.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sink_support import count_records, start_broker, stored_messages

from rmq_spark.spark.sink_targets import lock_holder
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 100_000
PER_TRIGGER = 10_000
JOB = Path(__file__).with_name("sink_stream_job.py")
REPO = Path(__file__).resolve().parents[2]


def fill_input(root: Path) -> None:
    config = StoreConfig(root_dir=root, segment_size_bytes=64 << 20, flush_policy=FlushPolicy.ASYNC)
    with MessageStore.open(config) as store:
        for start in range(0, ROWS, 10_000):
            store.put_batch(
                [PutRequest("in", f"m{i}".encode(), tags="T") for i in range(start, start + 10_000)]
            )


def run_job(tmp_path: Path, *destination: str) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, str(JOB), "--input", str(tmp_path / "input"),
        "--checkpoint", str(tmp_path / "checkpoint"), "--per-trigger", str(PER_TRIGGER),
        *destination,
    ]  # fmt: skip
    log = (tmp_path / "job.log").open("ab")
    env = dict(os.environ, PYTHONPATH=str(REPO), PYSPARK_PYTHON=sys.executable)
    return subprocess.Popen(
        command, stdout=log, stderr=log, env=env, cwd=REPO, start_new_session=True
    )


def batch_files(checkpoint: Path, kind: str) -> int:
    folder = checkpoint / kind
    return sum(1 for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else 0


def kill_mid_batch(
    job: subprocess.Popen[bytes], tmp_path: Path, output: Path, *, embedded: bool = True
) -> tuple[int, int]:
    """SIGKILL the query once a batch after the first is planned, uncommitted, and partly
    stored; returns (batches committed, rows stored) at the kill."""
    checkpoint = tmp_path / "checkpoint"
    deadline = time.monotonic() + 300
    try:
        while True:
            assert job.poll() is None, (tmp_path / "job.log").read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "no batch was caught in flight"
            committed = batch_files(checkpoint, "commits")
            planned = batch_files(checkpoint, "offsets")
            if committed >= 1 and planned > committed:
                stored = count_records(output)
                if stored > committed * PER_TRIGGER:
                    break
            time.sleep(0.005)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=60)
    # PySpark's worker daemon runs in its own process group: its workers die once they see
    # the JVM gone; one still writing is killed too (it is this job's).
    holder = lock_holder(output) if embedded else None
    if holder is not None and holder != os.getpid():
        os.kill(holder, signal.SIGKILL)
    return batch_files(checkpoint, "commits"), count_records(output)


def check_exactly_once(output: Path) -> None:
    out = [m for m in stored_messages(output) if m["topic"] == "out"]
    keys = collections.Counter(m["UNIQ_KEY"] for m in out)
    bodies = collections.Counter(m["body"] for m in out)
    assert len(out) == ROWS, f"{len(out)} rows stored, {len(out) - len(keys)} repeated keys"
    assert max(keys.values()) == 1 and max(bodies.values()) == 1
    assert set(bodies) == {f"m{i}" for i in range(ROWS)}


def test_a_killed_streaming_write_into_a_store_restarts_exactly_once(tmp_path: Path) -> None:
    fill_input(tmp_path / "input")
    output = tmp_path / "output"
    job = run_job(tmp_path, "--output", str(output))
    committed, stored = kill_mid_batch(job, tmp_path, output)
    assert committed * PER_TRIGGER < stored < ROWS, (committed, stored)
    again = run_job(tmp_path, "--output", str(output))
    assert again.wait(timeout=600) == 0, (tmp_path / "job.log").read_text(errors="replace")[-3000:]
    check_exactly_once(output)
    print(f"killed after {committed} batches with {stored} rows stored")


def test_a_killed_streaming_write_through_a_broker_restarts_exactly_once(
    spark, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    fill_input(tmp_path / "input")
    output = tmp_path / "output"
    broker = start_broker(output, tmp_path / "work", "store.segment_size_bytes=67108864")
    try:
        job = run_job(tmp_path, "--brokers", broker.address)
        committed, stored = kill_mid_batch(job, tmp_path, output, embedded=False)
        assert committed * PER_TRIGGER < stored < ROWS, (committed, stored)
        again = run_job(tmp_path, "--brokers", broker.address)
        log = (tmp_path / "job.log").read_text(errors="replace")[-3000:]
        assert again.wait(timeout=600) == 0, log
    finally:
        assert broker.stop() == 0, broker.log_text()
    check_exactly_once(output)
    print(f"killed after {committed} batches with {stored} rows stored")
