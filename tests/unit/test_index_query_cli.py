"""``rmq-spark query --store DIR --topic T --key K``: the key looked up in the store's
``index/`` (no reput tables), beside a running store, hash collisions filtered out."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from rmq_spark.cli import query_command
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.hashing import java_string_hash
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest


def _query(store: Path, *extra: str) -> int:
    parser = argparse.ArgumentParser()
    query_command.register(parser.add_subparsers(dest="command"))
    return query_command.run(parser.parse_args(["query", "--store", str(store), *extra]))


def test_query_by_key_reads_the_index_beside_a_running_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert java_string_hash("Aa") == java_string_hash("BB")  # a collision, on purpose
    root = tmp_path / "store"
    store = MessageStore.open(StoreConfig(root_dir=root, segment_size_bytes=1 << 20))
    try:
        first = store.put(PutRequest("orders", b"one", keys="order-1 Aa"))
        store.put(PutRequest("other", b"elsewhere", keys="order-1"))
        second = store.put_batch([PutRequest("orders", b"two", keys="order-1")])[0]
        assert store.consume_queues.wait_dispatched(store.max_offset, 10)
        assert _query(root, "--topic", "orders", "--key", "order-1") == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [line["physical_offset"] for line in lines] == [
            first.physical_offset, second.physical_offset,
        ]  # fmt: skip
        assert _query(root, "--topic", "orders", "--key", second.uniq_key, "--no-body") == 0
        (line,) = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
        assert line["physical_offset"] == second.physical_offset and "body_base64" not in line
        assert _query(root, "--topic", "orders", "--key", "BB") == 1  # same hash as "Aa"
        assert "no message of topic 'orders' for key 'BB'" in capsys.readouterr().err
        end = first.store_timestamp_ms  # --end is exclusive
        assert _query(root, "--topic", "orders", "--key", "Aa", "--end", str(end)) == 1
    finally:
        store.close()


def test_query_by_key_of_a_store_without_index_finds_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MessageStore.open(StoreConfig(root_dir=root, consume_queue=False)) as store:
        store.put(PutRequest("orders", b"one", keys="order-1"))
    assert _query(root, "--topic", "orders", "--key", "order-1") == 1
    assert not (root / "index").exists()
