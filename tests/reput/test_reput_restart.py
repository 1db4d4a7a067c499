"""Where a restarted reput starts and what each table still needs after a crash.

``fresh_start_offset`` is PURE and tested without Spark; the last test reproduces, with a real
store and real Delta tables, a crash in the first batch after which the checkpoint is gone:
``messages`` and ``consume_queue`` got the batch, ``message_index`` did not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reput_rows import (
    LEVELS_MS,
    expected_consume_queue,
    expected_index,
    plain_rows,
    row_from_record,
)

from rmq_spark.spark.reput import (
    ReputBatchWriter,
    fresh_start_offset,
    logged_batch_range,
    parse_offset_log_entry,
    run_reput,
)
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.tables import (
    CONSUME_QUEUE,
    MESSAGE_INDEX,
    MESSAGES,
    committed_floors,
    table_path,
)
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest


def test_fresh_start_is_the_lowest_last_record_when_every_table_has_a_reput_commit() -> None:
    progress = {MESSAGES: (1000, 900), MESSAGE_INDEX: (1000, 700), CONSUME_QUEUE: (600, 500)}
    assert fresh_start_offset(progress) == 500


def test_fresh_start_is_the_log_start_when_a_table_never_got_a_reput_commit() -> None:
    # The crash: messages and consume_queue committed the first batch, message_index did not.
    # Starting after messages' last record (what the job did) would skip every key below it.
    progress = {MESSAGES: (1000, 900), MESSAGE_INDEX: (-1, None), CONSUME_QUEUE: (1000, 900)}
    assert fresh_start_offset(progress) is None


def test_fresh_start_is_the_log_start_when_a_committed_table_has_no_rows() -> None:
    # message_index committed [0, 500) holding no keys; its completeness names no record start.
    progress = {MESSAGES: (1000, 900), MESSAGE_INDEX: (500, None), CONSUME_QUEUE: (1000, 900)}
    assert fresh_start_offset(progress) is None


def test_fresh_start_of_empty_tables_is_the_log_start() -> None:
    assert fresh_start_offset({}) is None
    assert fresh_start_offset({MESSAGES: (-1, None), MESSAGE_INDEX: (-1, None)}) is None


def _offset_entry(offset: int) -> str:
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}})
    return f"v1\n{meta}\n{json.dumps({'physical_offset': offset})}\n"


def test_batch_range_comes_from_the_offset_log_entries_of_the_batch_and_its_predecessor(
    tmp_path: Path,
) -> None:
    (tmp_path / "0").write_text(_offset_entry(13436))
    (tmp_path / "1").write_text(_offset_entry(84890))
    assert logged_batch_range(tmp_path, 0) == (0, 13436)
    assert logged_batch_range(tmp_path, 1) == (13436, 84890)
    assert logged_batch_range(tmp_path, 2) is None  # not logged: the caller counts the batch


def test_offset_log_entries_of_another_shape_are_not_guessed_at() -> None:
    assert parse_offset_log_entry(_offset_entry(7)) == 7
    assert parse_offset_log_entry("v1\n{}\n") is None
    assert parse_offset_log_entry('v1\n{}\n{"offset": 3}\n') is None
    assert parse_offset_log_entry('v1\n{}\n{"physical_offset": "3"}\n') is None
    assert parse_offset_log_entry("v1\n{}\nnot json\n") is None
    assert parse_offset_log_entry('v1\n{}\n{"physical_offset": 1}\n{"physical_offset": 2}') is None


@pytest.mark.spark
def test_table_missing_a_crashed_first_batch_gets_it_after_a_fresh_checkpoint_restart(
    spark, tmp_path: Path
) -> None:
    store_dir, tables = tmp_path / "store", tmp_path / "tables"
    config = StoreConfig(root_dir=store_dir, segment_size_bytes=4096)
    with MessageStore.open(config) as store:
        results = [
            store.put(PutRequest("orders", b"x" * 50, tags="t", keys=(f"k{i}",))) for i in range(12)
        ]
        rows = [
            row_from_record(d.record, d.total_size)
            for d in map(store.read_decoded, (r.physical_offset for r in results))
        ]
    end = rows[-1]["physical_offset"] + rows[-1]["total_size"]
    reput = ReputConfig(tables_dir=tables, available_now=True, optimize_interval_batches=0)
    crashed = ReputBatchWriter(spark, store_dir, reput, LEVELS_MS)
    crashed.floors[MESSAGE_INDEX] = end  # the crash: message_index never got the batch
    crashed.write_range(0, end, 0)
    floors = committed_floors(spark, tables)
    assert floors == {MESSAGES: end, CONSUME_QUEUE: end, MESSAGE_INDEX: 0}

    run_reput(spark, store_dir, reput, LEVELS_MS)  # a fresh checkpoint over these tables

    def table(name: str) -> list[tuple]:
        return plain_rows(spark.read.format("delta").load(str(table_path(tables, name))).collect())

    assert table(MESSAGE_INDEX) == plain_rows(expected_index(rows))
    assert table(CONSUME_QUEUE) == plain_rows(expected_consume_queue(rows))
    assert sorted(row[3] for row in table(MESSAGES)) == [r["physical_offset"] for r in rows]
