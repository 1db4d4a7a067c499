"""One store vs several is a value decided once (``tables.StoreLayout``), not a flag threaded
through the reput: its two layouts give the tables' columns, rows, commits and app ids, the
reput's functions take a layout (or read it from the tables), and ``tables_lag`` of one store
in tables of several is that store's without being told."""

from __future__ import annotations

import inspect
from pathlib import Path

import pyarrow as pa
import pytest
from reput_rows import LEVELS_MS

from rmq_spark.clock import SystemClock
from rmq_spark.spark import (
    reput,
    reput_files,
    reput_multi,
    reput_progress,
    reput_start,
    reput_writer,
    tables,
)
from rmq_spark.spark.reput import run_reput, tables_lag
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.reput_files import FILE_SCHEMAS, file_schema
from rmq_spark.spark.tables import (
    CONSUME_QUEUE,
    MESSAGES,
    ONE_STORE,
    STORE_COLUMN,
    TABLE_NAMES,
    StoreOfSeveral,
)
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

_MODULES = (reput, reput_files, reput_multi, reput_progress, reput_start, reput_writer, tables)


def _callables(module: object) -> list[tuple[str, object]]:
    found = []
    for name, value in vars(module).items():
        if inspect.isfunction(value) or inspect.isclass(value):
            if getattr(value, "__module__", None) == getattr(module, "__name__", None):
                found.append((name, value))
                if inspect.isclass(value):
                    found += [(f"{name}.{n}", f) for n, f in vars(value).items() if callable(f)]
    return found


def test_no_reput_function_takes_a_one_or_several_stores_flag() -> None:
    flagged = [
        f"{module.__name__}.{name}"
        for module in _MODULES
        for name, function in _callables(module)
        if {"several", "store_tag"} & set(inspect.signature(function).parameters)  # type: ignore[arg-type]
    ]
    assert flagged == []


def test_the_two_layouts_differ_only_by_the_store_column() -> None:
    several = StoreOfSeveral("/data/a")
    assert (ONE_STORE.app_id("rmq-reput"), several.app_id("rmq-reput")) == (
        "rmq-reput",
        "rmq-reput:/data/a",
    )
    for name in TABLE_NAMES:
        assert several.ddl(name) == f"{ONE_STORE.ddl(name)}, store string not null"
        assert file_schema(name) == FILE_SCHEMAS[name]
        assert file_schema(name, several).names == [*FILE_SCHEMAS[name].names, STORE_COLUMN]
    assert several.cluster_columns(CONSUME_QUEUE)[0] == STORE_COLUMN
    assert several.cluster_columns(MESSAGES) == ONE_STORE.cluster_columns(MESSAGES)
    rows = pa.table({"physical_offset": pa.array([1, 2], pa.int64())})
    assert ONE_STORE.tag(rows) is rows
    assert several.tag(rows).column(STORE_COLUMN).to_pylist() == ["/data/a", "/data/a"]
    assert ONE_STORE.commit_metadata() == {} and ONE_STORE.owns({"end_offset": 1})
    metadata = {"end_offset": 1, **several.commit_metadata()}
    assert several.owns(metadata) and not ONE_STORE.owns(metadata)
    assert not StoreOfSeveral("/data/b").owns(metadata)
    assert (ONE_STORE.store, several.store) == (None, "/data/a")


def _fill(root: Path, count: int) -> int:
    with MessageStore.open(StoreConfig(root_dir=root, segment_size_bytes=4096)) as store:
        for i in range(count):
            assert store.put(PutRequest("orders", b"m%d" % i, queue_id=i % 2, tags="T")).ok
        return store.confirmed_offset


@pytest.mark.spark
def test_tables_lag_of_a_store_in_tables_of_several_is_that_stores(spark, tmp_path: Path) -> None:
    s1, s2, out = tmp_path / "s1", tmp_path / "s2", tmp_path / "tables"
    ends = {s1: _fill(s1, 12), s2: _fill(s2, 3)}
    config = ReputConfig(tables_dir=out, available_now=True, optimize_interval_batches=0)
    run_reput(spark, [s1, s2], config, LEVELS_MS)
    assert tables.tables_layout(spark, out, s2) == StoreOfSeveral(str(s2.absolute()))
    for store, end in ends.items():  # the tables' layout, read from them, picks its rows
        lag = tables_lag(spark, store, out, clock=SystemClock())
        assert (lag.reput_offset, lag.behind_bytes) == (end, 0)
