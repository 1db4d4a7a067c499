"""What a reput batch asks of the driver's JVM through py4j: no name look-ups per batch.

Each dot of a ``jvm.org.apache....`` path is a py4j round trip whose package part the JVM
answers only after failing a class lookup over every jar on the class path, and PySpark's
conversion of a Java exception makes fourteen more. A flight recording of the reput job at
2,000 msgs/s put a fifth of the driver JVM's CPU there (Delta commits spelled that way, and a
Python query listener whose progress conversion throws five exceptions per batch).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from reput_rows import LEVELS_MS

from rmq_spark.spark.reput import run_reput
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.reput_timeline import parse_timeline
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest, PutStatus

pytestmark = pytest.mark.spark

UNKNOWN_MEMBER = "r\nu\n"  # py4j: "what is this name?" (a package, a class, ...)


@contextmanager
def _name_lookups(spark: Any) -> Iterator[Counter[str]]:
    """Count the py4j name look-ups of every thread while the block runs, by name."""
    client = spark._jvm._gateway_client
    send = client.send_command
    names: Counter[str] = Counter()

    def counting(command: str, *args: Any, **kwargs: Any) -> Any:
        if command.startswith(UNKNOWN_MEMBER):
            names[command.split("\n")[2]] += 1
        return send(command, *args, **kwargs)

    client.send_command = counting
    try:
        yield names
    finally:
        del client.send_command  # the class's method again


def _put(store_dir: Path, messages: int) -> int:
    """``messages`` puts; the size of one record in the log."""
    config = StoreConfig(root_dir=store_dir)
    with MessageStore.open(config) as store:
        results = [store.put(PutRequest("TopicTest", b"x" * 100)) for _ in range(messages)]
    assert all(r.status is PutStatus.PUT_OK for r in results), results
    return results[0].total_size


def _reput(spark: Any, tmp_path: Path, name: str, batches: int) -> tuple[Counter[str], int]:
    """An ``available_now`` reput of ``batches`` one-message batches; its name look-ups and
    how many batches it wrote."""
    store_dir = tmp_path / name / "store"
    record_bytes = _put(store_dir, batches)
    config = ReputConfig(
        tables_dir=tmp_path / name / "tables",
        available_now=True,
        max_bytes_per_trigger=record_bytes,
        optimize_interval_batches=0,
    )
    with _name_lookups(spark) as names:
        writer = run_reput(spark, store_dir, config, LEVELS_MS)
    return names, writer.batches_written


def test_a_batch_makes_no_name_lookups_in_the_jvm_and_each_logs_its_trigger_line(
    spark, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _reput(spark, tmp_path, "warm", 1)  # one-time look-ups (the session's, the first commit's)
    one, one_batches = _reput(spark, tmp_path, "one", 1)
    caplog.clear()  # the two runs above logged their batch 0 too
    with caplog.at_level(logging.INFO, logger="rmq_spark.reput"):
        five, five_batches = _reput(spark, tmp_path, "five", 5)
    assert (one_batches, five_batches) == (1, 5)
    per_batch = (sum(five.values()) - sum(one.values())) / 4
    # PySpark's foreachBatch wrapper looks up its session's class (2 per batch); the rest of
    # a batch's calls go to classes resolved once.
    assert per_batch <= 3, (per_batch, (five - one).most_common(12))
    triggers = [e for e in parse_timeline(caplog.text) if e["kind"] == "trigger"]
    assert sorted(e["batch_id"] for e in triggers if e["duration_ms"]) == [0, 1, 2, 3, 4]
    assert all("addBatch" in e["duration_ms"] for e in triggers if e["duration_ms"])
