"""The batch writer: three tables per micro-batch, each append idempotent under replay."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from reput_rows import LEVELS_MS, expected_consume_queue, expected_index, message, plain_rows

from rmq_spark.spark.reput import ReputBatchWriter
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.tables import (
    CONSUME_QUEUE,
    MESSAGE_INDEX,
    MESSAGES,
    append_idempotent,
    message_index_rows,
    optimize_tables,
    register_tables,
    table_path,
)

pytestmark = pytest.mark.spark


def _batches() -> list[list[dict]]:
    first = [
        message(0, tags="A", keys="k1 k2", uniq_key="U0"),
        message(100, queue_offset=1, tags="B", sys_flag=0x4, uniq_key="U1"),
        message(200, topic="SCHEDULE_TOPIC_XXXX", queue_id=1, extra={"DELAY": "2"}),
    ]
    second = [
        message(300, queue_offset=2, keys="k3", sys_flag=0x8),
        message(400, queue_offset=3, uniq_key="U4", sys_flag=0xC),
    ]
    return [first, second]


def _table(spark, tables: Path, name: str) -> list[tuple]:
    return plain_rows(spark.read.format("delta").load(str(table_path(tables, name))).collect())


def _writer(spark, tmp_path: Path) -> ReputBatchWriter:
    store = tmp_path / "store"
    store.mkdir(exist_ok=True)
    config = ReputConfig(tables_dir=tmp_path / "tables", optimize_interval_batches=0)
    return ReputBatchWriter(spark, store, config, LEVELS_MS)


def _assert_tables_hold_exactly(spark, tables: Path, rows: list[dict]) -> None:
    assert _table(spark, tables, CONSUME_QUEUE) == plain_rows(expected_consume_queue(rows))
    assert _table(spark, tables, MESSAGE_INDEX) == plain_rows(expected_index(rows))
    offsets = sorted(r[3] for r in _table(spark, tables, MESSAGES))
    assert offsets == sorted(row["physical_offset"] for row in rows)


def test_replayed_batches_add_nothing_twice(spark, tmp_path: Path, make_source_rows) -> None:
    first, second = _batches()
    writer = _writer(spark, tmp_path)
    writer(make_source_rows(first), 0)
    writer(make_source_rows(first), 0)  # the same batch again in the same driver
    writer(make_source_rows(second), 1)

    restarted = _writer(spark, tmp_path)  # a new driver: floors come from the tables
    restarted(make_source_rows(second), 1)
    restarted.floors = dict.fromkeys(restarted.floors, 0)  # only Delta's txn check is left
    restarted(make_source_rows(first), 0)
    restarted(make_source_rows(second), 1)

    _assert_tables_hold_exactly(spark, tmp_path / "tables", first + second)
    assert writer.messages_written == 5


def test_batch_interrupted_after_the_first_table_completes_on_replay(
    spark, tmp_path: Path, make_source_rows
) -> None:
    first, _ = _batches()
    tables = tmp_path / "tables"
    writer = _writer(spark, tmp_path)
    batch = make_source_rows(first)
    # The crash: only message_index of batch 0 (log end 300) was committed.
    append_idempotent(
        message_index_rows(batch),
        tables,
        MESSAGE_INDEX,
        app_id="rmq-reput",
        version=300,
        metadata={},
    )
    writer = _writer(spark, tmp_path)
    writer.floors = dict.fromkeys(writer.floors, 0)
    writer(batch, 0)

    _assert_tables_hold_exactly(spark, tables, first)


def test_register_tables_points_the_catalog_at_each_tables_dir(
    spark, tmp_path: Path, make_source_rows
) -> None:
    first, second = _batches()
    for name, rows in (("a", first), ("b", second)):
        config = ReputConfig(tables_dir=tmp_path / name, optimize_interval_batches=0)
        (tmp_path / "store").mkdir(exist_ok=True)
        ReputBatchWriter(spark, tmp_path / "store", config, LEVELS_MS)(make_source_rows(rows), 0)
    register_tables(spark, tmp_path / "a", "rmq")
    assert spark.sql("SELECT count(*) FROM rmq.messages").first()[0] == len(first)
    register_tables(spark, tmp_path / "b", "rmq")
    assert spark.sql("SELECT count(*) FROM rmq.messages").first()[0] == len(second)
    detail = spark.sql("DESCRIBE DETAIL rmq.consume_queue").first()
    assert list(detail["clusteringColumns"]) == ["topic", "queue_id", "queue_offset"]


@pytest.mark.slow
def test_optimize_commits_next_to_concurrent_appends(
    spark, tmp_path: Path, make_source_rows
) -> None:
    tables = tmp_path / "tables"
    writer = _writer(spark, tmp_path)
    rows = [message(i * 100, queue_offset=i, keys=f"k{i}") for i in range(40)]
    chunks = [rows[i : i + 5] for i in range(0, len(rows), 5)]
    writer(make_source_rows(chunks[0]), 0)
    errors: list[BaseException] = []

    def append_rest() -> None:
        try:
            for batch_id, chunk in enumerate(chunks[1:], start=1):
                writer(make_source_rows(chunk), batch_id)
        except BaseException as err:  # reported below, in the test's thread
            errors.append(err)

    appender = threading.Thread(target=append_rest)
    appender.start()
    compactions = 0
    while appender.is_alive() or compactions < 2:
        optimize_tables(spark, tables)
        compactions += 1
    appender.join()

    assert errors == []
    _assert_tables_hold_exactly(spark, tables, rows)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table_path(tables, MESSAGES)}`").collect()
    assert {"WRITE", "OPTIMIZE"} <= {row.operation for row in history}
