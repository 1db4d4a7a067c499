"""Ctrl-C on a running ``rmq-spark reput`` (SIGINT to its whole process group, as a terminal
sends it) stops the stream cleanly: a short log line, no py4j tracebacks, exit code 0. So does
TERM to the whole group (``systemctl stop``, a harness's ``killpg``), which the driver's JVM
does not ignore as it does SIGINT: it ends at once, and the job says so in one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_ctrl_c_stops_the_reput_job_without_tracebacks(tmp_path: Path, signum: int) -> None:
    store = tmp_path / "store"
    with MessageStore.open(StoreConfig(root_dir=store, segment_size_bytes=1 << 20)) as opened:
        opened.put(PutRequest("T", b"hello"))
    out = tmp_path / "out.txt"
    with out.open("wb") as sink:
        job = subprocess.Popen(
            [sys.executable, "-m", "rmq_spark.cli.main", "reput", "--store", str(store),
             "--tables", str(tmp_path / "tables"), "--trigger", "1s",
             "--set", "spark.master=local[1]"],
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
            env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # a JVM start on a busy machine; bounded
        while "reput batch 0" not in out.read_text(errors="replace"):
            assert job.poll() is None, out.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the first micro-batch never came"
            time.sleep(0.5)
        os.killpg(job.pid, signum)
        code = job.wait(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    text = out.read_text(errors="replace")
    assert code == 0, text[-3000:]
    if signum == signal.SIGTERM:  # the JVM and the workers may end before the job stops
        stopped = (
            "the Spark driver's JVM ended with the signal",
            "the query failed as it was being stopped",
            "reput: stopping",
        )
        assert any(line in text for line in stopped), text[-3000:]
    else:
        assert "reput: stopping" in text
    assert "Traceback" not in text and "Py4J" not in text, text[-3000:]
