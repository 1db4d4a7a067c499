"""A reput job whose streaming source's Python worker starts slower than Spark waits for.

Spark gives that worker (a process of its own, not the daemon's) a fixed 10 s to connect
back; on a starved machine the stream used to fail at start. The job restarts from its
checkpoint instead, a bounded number of times, and when it gives up it says why in one line.
The slow start is real: ``PYSPARK_PYTHON`` is a script that sleeps before it runs Python."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmq_spark.spark.reput import WORKER_START_RESTARTS
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

RUNNER = "python_streaming_source_runner"  # the stream's own worker; the daemon is not slowed


def _slow_python(tmp_path: Path, slow_starts: int) -> Path:
    """A Python whose first ``slow_starts`` source runners start 12 s late."""
    script = tmp_path / "slow-python"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *{RUNNER}*)\n'
        f'  n=$(ls "{tmp_path}/starts" 2>/dev/null | wc -l)\n'
        f'  mkdir -p "{tmp_path}/starts/$$"\n'
        f'  [ "$n" -lt {slow_starts} ] && sleep 12;;\n'
        "esac\n"
        f'exec "{sys.executable}" "$@"\n'
    )
    script.chmod(0o755)
    return script


def _reput(tmp_path: Path, slow_starts: int) -> subprocess.CompletedProcess[str]:
    store = tmp_path / "store"
    with MessageStore.open(StoreConfig(root_dir=store, segment_size_bytes=1 << 20)) as opened:
        opened.put(PutRequest("T", b"hello"))
    python = _slow_python(tmp_path, slow_starts)
    return subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "reput", "--store", str(store),
         "--tables", str(tmp_path / "tables"), "--available-now",
         "--set", "spark.master=local[1]"],
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYSPARK_PYTHON=str(python)),
    )  # fmt: skip


def test_a_source_worker_that_starts_late_once_costs_a_restart_not_the_job(
    tmp_path: Path,
) -> None:
    job = _reput(tmp_path, slow_starts=1)
    assert job.returncode == 0, job.stderr[-3000:]
    assert job.stderr.count("restarting from the checkpoint") == 1, job.stderr[-3000:]
    assert "reput: done, 1 batches, 1 messages" in job.stderr


def test_a_source_worker_that_never_starts_in_time_fails_the_job_in_one_line(
    tmp_path: Path,
) -> None:
    job = _reput(tmp_path, slow_starts=WORKER_START_RESTARTS + 1)
    assert job.returncode != 0
    assert job.stderr.count("restarting from the checkpoint") == WORKER_START_RESTARTS
    [error] = [line for line in job.stderr.splitlines() if "rmq-spark reput: error" in line]
    assert "Python worker failed to connect back" in error
    assert "=== Streaming Query ===" not in job.stderr, job.stderr[-3000:]
