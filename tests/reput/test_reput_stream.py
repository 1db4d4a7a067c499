"""The reput stream end to end: a real store, the rocketmq source, Delta tables, queries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reput_rows import (
    LEVELS_MS,
    expected_consume_queue,
    expected_index,
    plain_rows,
    row_from_dump,
    row_from_record,
)

from rmq_spark.cli.main import main as cli_main
from rmq_spark.cli.query_command import row_json
from rmq_spark.clock import ManualClock, SystemClock
from rmq_spark.spark.query import message_by_msg_id, messages_by_key, messages_by_time
from rmq_spark.spark.reput import run_reput, tables_lag
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.tables import CONSUME_QUEUE, MESSAGE_INDEX, MESSAGES, table_path
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest, PutStatus

pytestmark = pytest.mark.spark

SEGMENT_BYTES = 4096  # a roll every dozen messages


def _requests(round_index: int) -> list[PutRequest]:
    many_keys = tuple(f"r{round_index}-key-{i}" for i in range(25))
    out = []
    for i in range(24):
        kind = i % 6
        topic = "orders" if i % 2 else "payments"
        if kind == 0:
            out.append(PutRequest(topic, b"x" * 200, tags="TagA", keys=(f"k{round_index}-{i}",)))
        elif kind == 1:
            out.append(PutRequest(topic, b"y" * 150, keys=many_keys))
        elif kind == 2:
            out.append(PutRequest(topic, b"d", tags="late", properties={"DELAY": str(i % 20)}))
        elif kind == 3:
            out.append(PutRequest(topic, b"p", tags="half", sys_flag=0x4, keys=("prep",)))
        elif kind == 4:
            out.append(PutRequest(topic, b"c", tags="中文", sys_flag=0x8, keys=("commit",)))
        else:
            out.append(PutRequest(topic, b"r", sys_flag=0xC, keys=("rolled-back",)))
    return out


def _put_round(store_dir: Path, round_index: int) -> list[int]:
    config = StoreConfig(root_dir=store_dir, segment_size_bytes=SEGMENT_BYTES)
    with MessageStore.open(config) as store:
        results = [store.put(request) for request in _requests(round_index)]
    assert all(r.status is PutStatus.PUT_OK for r in results), results
    return [r.physical_offset for r in results]


def _stored_rows(store_dir: Path, offsets: list[int]) -> list[dict]:
    config = StoreConfig(root_dir=store_dir, segment_size_bytes=SEGMENT_BYTES)
    with MessageStore.open(config) as store:
        decoded = [store.read_decoded(offset) for offset in offsets]
    return [row_from_record(d.record, d.total_size) for d in decoded]


def _dump(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    """What ``rmq-spark dump --store DIR`` prints, parsed."""
    capsys.readouterr()
    assert cli_main(["dump", "--store", str(store_dir)]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _table(spark, tables: Path, name: str):
    return spark.read.format("delta").load(str(table_path(tables, name)))


def test_tables_equal_the_log_after_micro_batches_across_segment_rolls(
    spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_dir, tables = tmp_path / "store", tmp_path / "tables"
    config = ReputConfig(
        tables_dir=tables,
        available_now=True,
        max_bytes_per_trigger=3 * 1024,
        optimize_interval_batches=3,
    )
    offsets = _put_round(store_dir, 0)
    first = run_reput(spark, store_dir, config, LEVELS_MS)
    round_one = _put_round(store_dir, 1)
    (last_of_round_zero,) = _stored_rows(store_dir, offsets[-1:])
    offsets += round_one
    waiting = _stored_rows(store_dir, round_one)
    first_stored_ms = min(round(r["store_timestamp"].timestamp() * 1000) for r in waiting)
    lag = tables_lag(spark, store_dir, tables, clock=ManualClock(first_stored_ms + 5000))
    assert (lag.behind_messages, lag.behind_ms, lag.messages_exact) == (len(round_one), 5000, True)
    assert (
        lag.reput_offset == last_of_round_zero["physical_offset"] + last_of_round_zero["total_size"]
    )
    assert lag.durable_offset == waiting[-1]["physical_offset"] + waiting[-1]["total_size"]
    assert lag.behind_bytes == lag.durable_offset - lag.reput_offset
    second = run_reput(spark, store_dir, config, LEVELS_MS)

    assert first.batches_written >= 3 and second.batches_written >= 3
    assert len(list((store_dir / "commitlog").iterdir())) >= 4
    dumped = _dump(store_dir, capsys)
    assert [d["physical_offset"] for d in dumped] == offsets
    rows = [row_from_dump(d) for d in dumped]
    assert plain_rows(_table(spark, tables, CONSUME_QUEUE).collect()) == plain_rows(
        expected_consume_queue(rows)
    )
    assert plain_rows(_table(spark, tables, MESSAGE_INDEX).collect()) == plain_rows(
        expected_index(rows)
    )
    messages = _table(spark, tables, MESSAGES)
    as_dumped = [row_json(r.asDict()) for r in messages.orderBy("physical_offset").collect()]
    assert as_dumped == dumped  # the messages table says what `rmq-spark dump` says, row for row
    scheduled = [r for r in rows if r["topic"] == "SCHEDULE_TOPIC_XXXX"]
    assert scheduled, "the DELAY messages went to the schedule topic"

    lag = tables_lag(spark, store_dir, tables, clock=SystemClock())
    assert (lag.behind_bytes, lag.behind_messages, lag.behind_ms) == (0, 0, 0)

    hits = messages_by_key(spark, tables, "orders", "r1-key-7").collect()
    assert [h.physical_offset for h in hits] == sorted(
        r["physical_offset"]
        for r in rows
        if r["topic"] == "orders"
        and "r1-key-7" in r["properties"].get("KEYS", "").split(" ")
        and r["sys_flag"] & 0xC != 0xC
    )
    some = rows[5]
    record = message_by_msg_id(
        store_dir, messages.where(f"physical_offset = {some['physical_offset']}").first().msg_id
    )
    assert record.physical_offset == some["physical_offset"]
    in_range = messages_by_time(spark, tables, "payments", 0, None).count()
    assert in_range == sum(1 for r in rows if r["topic"] == "payments")
    _check_local_lookups(spark, tables, [h.physical_offset for h in hits])


def _check_local_lookups(spark, tables: Path, key_hits: list[int]) -> None:
    """The JVM-free lookups (``query_local``, what ``rmq-spark query`` uses) answer as the
    Spark ones do, and the CLI answers in a process that cannot start a JVM."""
    import subprocess
    import sys

    from rmq_spark.spark.query_local import local_messages_by_key, local_messages_by_time

    local = local_messages_by_key(tables, "orders", "r1-key-7")
    assert local.column("physical_offset").to_pylist() == key_hits
    spark_rows = messages_by_time(spark, tables, "payments", 0, None).collect()
    local_rows = local_messages_by_time(tables, "payments", 0, None).to_pylist()
    assert [row_json(r) for r in local_rows] == [row_json(r.asDict()) for r in spark_rows]
    env = {"PATH": "/nonexistent", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "query", "--tables", str(tables),
         "--topic", "orders", "--key", "r1-key-7"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["physical_offset"] for line in done.stdout.splitlines()] == key_hits
    done = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "query", "--tables", str(tables),
         "--topic", "orders", "--key", "no-such-key"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "")
    assert (
        done.stderr.strip() == "rmq-spark query: no message of topic 'orders' for key 'no-such-key'"
    )
