"""A consumerGroup query killed with SIGKILL mid-run and restarted, against a real broker.

The group's committed offsets never pass what the checkpoint committed (the last batch in
``commits/``, translated to queue offsets), and the output has every message once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from broker.broker_harness import start_broker

from rmq_spark.broker.config_files.rocketmq_config_files import read_consumer_offsets
from rmq_spark.broker.producer import Producer
from rmq_spark.spark.group_offsets import queue_offsets_at

pytestmark = [pytest.mark.spark, pytest.mark.slow]

_JOB = Path(__file__).with_name("consumer_group_job.py")
_REPO = Path(__file__).resolve().parents[2]
_TOTAL = 300


def _job(store: Path, tmp: Path, address: str, mode: str) -> subprocess.Popen[bytes]:
    args = [str(store), str(tmp / "ck"), str(tmp / "out"), address, "killable", mode]
    return subprocess.Popen(
        [sys.executable, str(_JOB), *args],
        cwd=_REPO,
        env={**os.environ, "PYTHONPATH": str(_REPO)},
        stdout=subprocess.DEVNULL,
        stderr=(tmp / f"job-{mode}.log").open("wb"),
    )


def _checkpoint_committed_end(checkpoint: Path) -> int:
    """The CommitLog offset at the end of the last batch in the checkpoint's commit log."""
    commits = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    if not commits:
        return 0
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
    return int(json.loads(lines[-1])["physical_offset"])


def _group(store: Path) -> dict[int, int]:
    return read_consumer_offsets(store).get(("orders", "killable"), {})


def _assert_group_not_ahead(store: Path, checkpoint: Path) -> None:
    allowed = queue_offsets_at(store, ["orders"], _checkpoint_committed_end(checkpoint))
    for queue_id, offset in _group(store).items():
        assert offset <= allowed[("orders", queue_id)], (queue_id, offset, allowed)


def test_a_killed_group_query_restarts_without_loss_duplicates_or_a_group_ahead(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    broker = start_broker(store, tmp_path / "work", "broker.topics=orders:2")
    try:
        with Producer(broker.address) as producer:
            for i in range(_TOTAL):
                producer.send("orders", f"k{i:03}".encode())
        job = _job(store, tmp_path, broker.address, "processing")
        try:
            deadline = time.monotonic() + 120
            while len(list((tmp_path / "out").glob("batch-*.json"))) < 4 or not _group(store):
                assert job.poll() is None, (tmp_path / "job-processing.log").read_text()
                assert time.monotonic() < deadline, "the job never got going"
                # While it runs, the group is never ahead of the checkpoint's commits.
                if (tmp_path / "ck" / "commits").is_dir():
                    _assert_group_not_ahead(store, tmp_path / "ck")
                time.sleep(0.1)
        finally:
            job.send_signal(signal.SIGKILL)
            job.wait()
        _assert_group_not_ahead(store, tmp_path / "ck")
        assert sum(_group(store).values()) < _TOTAL  # killed mid-run
        again = _job(store, tmp_path, broker.address, "available-now")
        assert again.wait(timeout=240) == 0, (tmp_path / "job-available-now.log").read_text()
        _assert_group_not_ahead(store, tmp_path / "ck")
        assert sum(_group(store).values()) == _TOTAL  # caught up: lag 0
    finally:
        broker.stop()
    bodies = [
        body
        for path in (tmp_path / "out").glob("batch-*.json")
        for body in json.loads(path.read_text())
    ]
    assert sorted(bodies) == [f"k{i:03}" for i in range(_TOTAL)]  # every message once
