"""A ``query.stop()`` that interrupts a ``foreachBatch`` function stops the query cleanly, even
when the function's py4j error is a long Java stack trace, and the query restarts from its
checkpoint.

On ``stop()`` Spark tells an interruption apart from a failure by matching the error's text
against ``py4j.protocol.Py4JJavaError: An error occurred while calling((.|\\r\\n|\\r|\\n)*)...``
(``StreamExecution.PROXY_ERROR``). Java's regex engine recurses once per character of that
loop, so on the JVM's default 1 MB thread stack a text of about 8,000 characters (the trace of
a Spark job the stop cancelled is often longer) throws ``StackOverflowError`` inside Spark's
catch block: the stream thread dies without a recorded cause or a "Stopped" status. The
project's session gives the driver's threads a deeper stack (``driver_jvm.DRIVER_THREAD_STACK``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from broker.broker_harness import wait_for

pytestmark = [pytest.mark.spark]

PY4J_PREFIX = "py4j.protocol.Py4JJavaError: An error occurred while calling o1.collect.\n"
TRACE_LINE = "\tat org.apache.spark.scheduler.DAGScheduler.runJob(DAGScheduler.scala:1000)\n"
INTERRUPTED = ": java.lang.InterruptedException\n"


class InterruptedBatch:
    """A ``foreachBatch`` function that waits for the query's ``stop()``, then fails as a
    Spark job the stop cancelled does: a py4j error whose text is a 30 KB Java trace."""

    def __init__(self) -> None:
        self.query: Any = None
        self.running = threading.Event()

    def __call__(self, _df: Any, _batch_id: int) -> None:
        self.running.set()
        deadline = time.monotonic() + 120
        while self.query is None or self.query.isActive:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        raise RuntimeError(PY4J_PREFIX + TRACE_LINE * 400 + INTERRUPTED)


def _start(spark: Any, sink: Any, checkpoint: Path) -> Any:
    return (
        spark.readStream.format("rate").option("rowsPerSecond", 5).load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )  # fmt: skip


def test_stop_during_a_batch_with_a_long_py4j_error_stops_cleanly(
    spark: Any, tmp_path: Path
) -> None:
    checkpoint, interrupted = tmp_path / "checkpoint", InterruptedBatch()
    query = _start(spark, interrupted, checkpoint)
    interrupted.query = query
    try:
        assert interrupted.running.wait(120), "no batch started"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    assert query.status["message"] == "Stopped", query.status
    again = _start(spark, lambda _df, _batch_id: None, checkpoint)
    try:
        wait_for(lambda: len(again.recentProgress) >= 2, 120, "the restarted query to run")
    finally:
        again.stop()
    assert again.exception() is None, again.exception()
