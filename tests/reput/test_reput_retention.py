"""The reput job tells retention how far its tables are, so a full disk keeps the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reput_rows import LEVELS_MS

from rmq_spark.clock import ManualClock
from rmq_spark.spark.reput import run_reput
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest
from rmq_spark.store.reader_progress import read_reader_progress, reader_progress_path

pytestmark = pytest.mark.spark

SEGMENT_BYTES = 4096


def _config(store_dir: Path, **overrides: object) -> StoreConfig:
    return StoreConfig(
        root_dir=store_dir,
        segment_size_bytes=SEGMENT_BYTES,
        clean_resource_interval_ms=0,
        **overrides,  # type: ignore[arg-type]
    )


def _put(store_dir: Path, count: int) -> list[int]:
    with MessageStore.open(_config(store_dir)) as store:
        results = [store.put(PutRequest("orders", b"x" * 300)) for _ in range(count)]
    assert all(r.ok for r in results)
    return [r.physical_offset for r in results]


def test_reput_publishes_its_progress_and_a_full_disk_keeps_what_it_has_not_read(
    spark, tmp_path: Path
) -> None:
    store_dir, tables = tmp_path / "store", tmp_path / "tables"
    config = ReputConfig(
        tables_dir=tables,
        available_now=True,
        max_bytes_per_trigger=3 * 1024,
        optimize_interval_batches=0,
    )
    _put(store_dir, 30)
    writer = run_reput(spark, store_dir, config, LEVELS_MS, clock=ManualClock(1234))
    assert writer.batches_written >= 2 and writer.last_report is not None
    reput_end = writer.last_report.end_offset
    path = reader_progress_path(store_dir, config.reader_name)
    assert json.loads(path.read_text()) == {
        "version": 1,
        "name": f"reput:{tables.resolve()}",
        "physical_offset": reput_end,
        "updated_at_ms": 1234,
    }
    later = _put(store_dir, 40)  # the reput job is now behind by several segments
    assert later[-1] - reput_end > 3 * SEGMENT_BYTES
    full = _config(store_dir, disk_max_used_space_ratio=0.0001, disk_emergency_used_space_ratio=1.0)
    with MessageStore.open(full) as store:
        for _ in range(5):
            store.delete_expired()
        assert store.min_offset == reput_end // SEGMENT_BYTES * SEGMENT_BYTES
        assert read_reader_progress(store_dir)[0].physical_offset == reput_end
        assert store.read(reput_end).body  # the first message the tables lack is still there
