"""The reput job over two stores (one per broker): both stores' messages in the same tables,
tagged with their store; each store's consume_queue rows equal its own ConsumeQueue files; a
batch that failed after one store committed is finished on restart without a duplicate; a
restart resumes each store from its own offset; mixing one-store and two-store tables is
refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reput_rows import LEVELS_MS
from test_reput_vs_consume_queue import _broker_units, _requests

from rmq_spark.errors import SourceError, StoreLayoutMismatchError
from rmq_spark.spark.delta_append import committed_txn_version
from rmq_spark.spark.reput import BatchReport, run_reput, start_reput, store_list
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.reput_start import logged_store_ranges, parse_store_offsets
from rmq_spark.spark.tables import CONSUME_QUEUE, MESSAGES, TABLE_NAMES, ensure_tables, table_path
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest
from rmq_spark.store.reader_progress import read_reader_progress

_CQ_COLUMNS = ["topic", "queue_id", "queue_offset", "physical_offset", "total_size", "tags_code"]


def _entry(stores: dict[str, int]) -> str:
    offsets = {"stores": {s: {"physical_offset": n} for s, n in stores.items()}}
    return f"v1\n{{}}\n{json.dumps(offsets)}\n"


def test_store_ranges_come_from_the_multi_store_offset_log(tmp_path: Path) -> None:
    (tmp_path / "0").write_text(_entry({"/a": 100, "/b": 40}))
    (tmp_path / "1").write_text(_entry({"/a": 100, "/b": 90}))
    assert logged_store_ranges(tmp_path, 0) == {"/a": (0, 100), "/b": (0, 40)}
    assert logged_store_ranges(tmp_path, 1) == {"/a": (100, 100), "/b": (40, 90)}
    assert logged_store_ranges(tmp_path, 2) is None
    assert parse_store_offsets('v1\n{}\n{"physical_offset": 3}\n') is None
    assert parse_store_offsets('v1\n{}\n{"stores": {"/a": {"physical_offset": "3"}}}\n') is None


def test_store_lists_are_paths_or_comma_lists_and_name_no_store_twice(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert store_list(f"{a},{b}") == (str(a), str(b))
    assert store_list([a, f"file://{b}"]) == (str(a), str(b))
    assert store_list(a) == (str(a),)
    with pytest.raises(SourceError, match="named twice"):
        store_list([a, a])


def _fill(root: Path, requests: list[PutRequest]) -> list:
    config = StoreConfig(root_dir=root, segment_size_bytes=4096)
    with MessageStore.open(config) as store:
        assert all(store.put(request).ok for request in requests)
        return _broker_units(store)


def _units_by_store(spark, tables: Path) -> dict[str, list]:  # noqa: ANN001
    table = spark.read.format("delta").load(str(table_path(tables, CONSUME_QUEUE)))
    found: dict[str, list] = {}
    for row in table.select("store", *_CQ_COLUMNS).collect():
        found.setdefault(row["store"], []).append(tuple(row)[1:])
    return {store: sorted(units) for store, units in found.items()}


@pytest.mark.spark
@pytest.mark.slow
def test_reput_over_two_stores_matches_each_stores_consume_queue_across_a_failed_batch(
    spark, tmp_path: Path
) -> None:
    s1, s2, tables = tmp_path / "s1", tmp_path / "s2", tmp_path / "tables"
    requests = _requests()
    _fill(s1, requests)
    _fill(s2, requests[:25])  # the same topics and queues: only the store tells rows apart
    reput = ReputConfig(tables_dir=tables, available_now=True, optimize_interval_batches=0)

    def crash_after_the_first_store(report: BatchReport) -> None:
        raise RuntimeError(f"crash after {report.store} committed")

    query, _ = start_reput(spark, [s1, s2], reput, LEVELS_MS, on_batch=crash_after_the_first_store)
    with pytest.raises(Exception, match="crash after"):
        query.awaitTermination()
    first = _units_by_store(spark, tables)
    assert len(first) == 1  # one store's batch committed, the other's not: the failed batch

    run_reput(spark, f"{s1},{s2}", reput, LEVELS_MS)  # the restart replays the batch
    more = [PutRequest("orders", b"late", queue_id=1, tags="TagA") for _ in range(5)]
    live = {str(s1): _fill(s1, more), str(s2): _fill(s2, more[:2])}
    writer = run_reput(spark, [s1, s2], reput, LEVELS_MS)  # resumes each store from its offset
    assert writer.messages_written == 7

    assert _units_by_store(spark, tables) == live  # equal: no unit missing, none twice
    messages = spark.read.format("delta").load(str(table_path(tables, MESSAGES)))
    counts = {row["store"]: row["count"] for row in messages.groupBy("store").count().collect()}
    assert counts == {str(s1): len(requests) + 5, str(s2): 25 + 2}
    for store in (s1, s2):
        with MessageStore.open(StoreConfig(root_dir=store, segment_size_bytes=4096)) as opened:
            end = opened.confirmed_offset
        app_id = f"{reput.txn_app_id}:{store}"
        for name in TABLE_NAMES:  # each store's log position is its own txn version
            assert committed_txn_version(spark, str(table_path(tables, name)), app_id) == end
        progress = {p.name: p.physical_offset for p in read_reader_progress(store)}
        assert progress[reput.reader_name] == end  # retention in each store waits for its rows

    # The same tables read over one store, or one-store tables over two: refused, unchanged.
    with pytest.raises(StoreLayoutMismatchError, match="several stores, now asked .* one store"):
        run_reput(spark, s1, reput, LEVELS_MS)
    one = ReputConfig(tables_dir=tmp_path / "one", available_now=True)
    ensure_tables(spark, one.tables_dir)
    with pytest.raises(StoreLayoutMismatchError, match="one store, now asked .* several"):
        run_reput(spark, [s1, s2], one, LEVELS_MS)
    assert _units_by_store(spark, tables) == live


def test_reput_command_takes_repeated_stores_comma_lists_or_the_config(tmp_path: Path) -> None:
    import argparse

    from rmq_spark.cli import reput_command
    from rmq_spark.errors import ConfigError

    parser = argparse.ArgumentParser()
    reput_command.add_reput_arguments(parser)
    args = parser.parse_args(["--store", "a,b", "--store", "c"])
    stores = reput_command.store_dirs(args, ReputConfig())
    assert [store.name for store in stores] == ["a", "b", "c"]
    args = parser.parse_args([])
    configured = ReputConfig(stores=(tmp_path / "x", tmp_path / "y"))
    assert reput_command.store_dirs(args, configured) == [tmp_path / "x", tmp_path / "y"]
    with pytest.raises(ConfigError, match="--store: no store given"):
        reput_command.store_dirs(args, ReputConfig())
    with pytest.raises(ConfigError, match="named twice"):
        reput_command.store_dirs(parser.parse_args(["--store", "a", "--store", "a"]), configured)


@pytest.mark.spark
def test_key_lookups_over_two_stores_pair_each_hit_with_its_own_stores_message(
    spark, tmp_path: Path
) -> None:
    """Physical offsets repeat across stores: a key found in one store must not bring the
    message at the same offset of the other store (same topic, same size) along."""
    from rmq_spark.spark.query import messages_by_key
    from rmq_spark.spark.query_local import local_messages_by_key

    s1, s2, tables = tmp_path / "s1", tmp_path / "s2", tmp_path / "tables"
    # Equal sizes, so each store's second message is at the same offset, and stored in this
    # order, so s2's second one falls between s1's two in time as well.
    _fill(s1, [PutRequest("orders", b"one-1", keys="K-one")])
    _fill(s2, [PutRequest("orders", b"two-1", keys="K-two")])
    _fill(s2, [PutRequest("orders", b"two-2", keys="K-two")])
    _fill(s1, [PutRequest("orders", b"one-2", keys="K-one")])
    run_reput(spark, [s1, s2], ReputConfig(tables_dir=tables, available_now=True), LEVELS_MS)

    local = local_messages_by_key(tables, "orders", "K-one").to_pylist()
    assert [(row["store"], row["body"]) for row in local] == [
        (str(s1), b"one-1"),
        (str(s1), b"one-2"),
    ]
    rows = messages_by_key(spark, tables, "orders", "K-two").collect()
    assert [(row["store"], bytes(row["body"])) for row in rows] == [
        (str(s2), b"two-1"),
        (str(s2), b"two-2"),
    ]
