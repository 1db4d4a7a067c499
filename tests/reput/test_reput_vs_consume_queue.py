"""The broker's ConsumeQueue (consumequeue/, dispatched by the store) and the reput job's
``consume_queue`` Delta table, built from the same store, agree unit for unit, for messages
of every kind (``cq_kinds.every_kind``: retry, DLQ, compressed, transactions, delay levels,
timers, malformed DELAY and TIMER values)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cq_kinds import every_kind
from reput_rows import LEVELS_MS

from rmq_spark.spark.reput import run_reput
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.tables import CONSUME_QUEUE, table_path
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.layout import RMQ_SYS_WHEEL_TIMER_TOPIC
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

pytestmark = pytest.mark.spark

Unit = tuple[str, int, int, int, int, int]


def _requests() -> list[PutRequest]:
    out = []
    for i in range(60):
        topic = ("orders", "payments", "audit")[i % 3]
        kind = i % 7
        if kind == 0:
            out.append(PutRequest(topic, b"x" * 120, queue_id=i % 4, tags="TagA"))
        elif kind == 1:
            out.append(PutRequest(topic, b"y", queue_id=i % 4, tags="TagA || TagB"))
        elif kind == 2:
            out.append(PutRequest(topic, b"d", tags="late", properties={"DELAY": str(i % 20)}))
        elif kind == 3:
            out.append(PutRequest(topic, b"p", tags="half", sys_flag=0x4))
        elif kind == 4:
            out.append(PutRequest(topic, b"c", queue_id=1, tags="中文", sys_flag=0x8))
        elif kind == 5:
            out.append(PutRequest(topic, b"r", sys_flag=0xC))
        else:
            due = {"TIMER_OUT_MS": str(1_700_000_000_000 + i), "REAL_TOPIC": topic}
            out.append(PutRequest(RMQ_SYS_WHEEL_TIMER_TOPIC, b"t", properties=due))
    return out + every_kind()


def _broker_units(store: MessageStore) -> list[Unit]:
    queues = store.consume_queues
    assert queues.wait_dispatched(store.confirmed_offset, 10)
    units: list[Unit] = []
    for topic, queue_ids in queues.queues().items():
        for queue_id in queue_ids:
            start = queues.min_offset(topic, queue_id)
            found = queues.units(topic, queue_id, start, queues.max_offset(topic, queue_id))
            units += [
                (topic, queue_id, start + i, u.physical_offset, u.size, u.tags_code)
                for i, u in enumerate(found)
            ]
    return sorted(units)


def test_the_brokers_consume_queue_equals_the_reput_table(spark, tmp_path: Path) -> None:
    store_dir, tables = tmp_path / "store", tmp_path / "tables"
    config = StoreConfig(root_dir=store_dir, segment_size_bytes=4096)
    with MessageStore.open(config) as store:
        assert all(store.put(request).ok for request in _requests())
        live = _broker_units(store)
    with MessageStore.open(config) as store:
        assert _broker_units(store) == live  # the same after a reopen (recovery)
    run_reput(spark, store_dir, ReputConfig(tables_dir=tables, available_now=True), LEVELS_MS)
    columns = ["topic", "queue_id", "queue_offset", "physical_offset", "total_size", "tags_code"]
    table = spark.read.format("delta").load(str(table_path(tables, CONSUME_QUEUE)))
    rows = sorted(tuple(row) for row in table.select(*columns).collect())
    dispatched = [r for r in _requests() if r.sys_flag & 0xC not in (0x4, 0xC)]
    assert len(rows) == len(dispatched)  # every record but the prepared and rolled-back ones
    assert rows == live
