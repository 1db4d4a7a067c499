"""The reput job's streaming query is named ``rmq-reput`` (Spark UI, spark.streams, progress)."""

from __future__ import annotations

from pathlib import Path

import pytest
from reput_rows import LEVELS_MS

from rmq_spark.spark.reput import REPUT_QUERY_NAME, start_reput
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

pytestmark = pytest.mark.spark


def test_the_reput_query_is_named_rmq_reput(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store_dir = tmp_path / "store"
    with MessageStore.open(StoreConfig(root_dir=store_dir, segment_size_bytes=4096)) as store:
        store.put(PutRequest("orders", b"one"))
    config = ReputConfig(tables_dir=tmp_path / "tables", available_now=True)
    query, writer = start_reput(spark, store_dir, config, LEVELS_MS)
    try:
        assert query.name == REPUT_QUERY_NAME == "rmq-reput"
        query.awaitTermination()
    finally:
        query.stop()
    assert writer.messages_written == 1
    assert query.lastProgress is not None and query.lastProgress["name"] == "rmq-reput"
