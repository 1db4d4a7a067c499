"""The reput query starts while its writer sets the tables up (issue 33's catch-up).

A query's first trigger waits about a second for its source's Python process; creating,
reading and registering the three tables (0.3 s warm, 1 s in a fresh session) used to run
before the query started, so a catch-up paid both one after the other.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from reput_rows import LEVELS_MS

from rmq_spark.errors import TableError
from rmq_spark.spark import reput_writer
from rmq_spark.spark.reput import REPUT_QUERY_NAME, start_reput
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.tables import MESSAGES, table_path
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

pytestmark = pytest.mark.spark


def _store(tmp_path: Path) -> Path:
    store_dir = tmp_path / "store"
    with MessageStore.open(StoreConfig(root_dir=store_dir, segment_size_bytes=4096)) as store:
        for i in range(3):
            store.put(PutRequest("orders", f"m{i}".encode()))
    return store_dir


def _active(spark) -> list[str]:  # type: ignore[no-untyped-def]
    return [query.name for query in spark.streams.active]


def test_the_query_is_running_while_the_writer_creates_the_tables(spark, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    seen: list[list[str]] = []
    real = reput_writer.ensure_tables

    def ensure_tables(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(_active(spark))
        return real(*args, **kwargs)

    monkeypatch.setattr(reput_writer, "ensure_tables", ensure_tables)
    config = ReputConfig(tables_dir=tmp_path / "tables", available_now=True)
    query, writer = start_reput(spark, _store(tmp_path), config, LEVELS_MS)
    try:
        query.awaitTermination()
    finally:
        query.stop()
    assert seen == [[REPUT_QUERY_NAME]]
    assert query.exception() is None
    assert writer.messages_written == 3


def test_a_writer_that_cannot_start_stops_the_query_and_raises_its_error(
    spark, tmp_path, monkeypatch
):  # type: ignore[no-untyped-def]
    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise TableError("tables: no room on the disk")

    monkeypatch.setattr(reput_writer, "ensure_tables", refuse)
    config = ReputConfig(tables_dir=tmp_path / "tables", available_now=True)
    with pytest.raises(TableError, match="no room on the disk"):
        start_reput(spark, _store(tmp_path), config, LEVELS_MS)
    assert REPUT_QUERY_NAME not in _active(spark)
    assert not (table_path(config.tables_dir, MESSAGES) / "_delta_log").exists()
