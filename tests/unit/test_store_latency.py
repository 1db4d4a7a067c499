"""``LatencyStats`` and the store's fsync timings that the broker's metrics read."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.latency import LatencyStats
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest


def test_durations_land_in_the_first_bucket_whose_bound_they_do_not_exceed() -> None:
    stats = LatencyStats((0.001, 0.01))
    stats.record(0.001)
    stats.record(0.005, times=3)
    stats.record(2.0)
    snap = stats.snapshot()
    assert (snap.counts, snap.count) == ((1, 3, 1), 5)
    assert snap.sum_s == pytest.approx(0.001 + 0.015 + 2.0)
    with pytest.raises(ValueError, match="increasing"):
        LatencyStats((0.01, 0.001))


def _config(root: Path, policy: FlushPolicy, io_uring: bool = False) -> StoreConfig:
    return StoreConfig(
        root_dir=root, segment_size_bytes=1 << 20, flush_policy=policy, io_uring=io_uring
    )


def test_a_sync_put_is_covered_by_a_timed_fsync(tmp_path: Path) -> None:
    with MessageStore.open(_config(tmp_path, FlushPolicy.SYNC)) as store:
        assert store.fsync_stats.count == 0
        store.put(PutRequest("orders", b"one"))
        assert store.fsync_stats.count >= 1
        assert store.fsync_stats.sum_s > 0


@pytest.mark.parametrize("io_uring", [False, True])
def test_async_puts_time_their_fsyncs_and_idle_flushes_are_not_counted(
    tmp_path: Path, io_uring: bool
) -> None:
    with MessageStore.open(_config(tmp_path, FlushPolicy.SYNC, io_uring)) as store:

        async def put() -> None:
            await store.put_async(PutRequest("orders", b"one"))

        asyncio.run(put())
        timed = store.fsync_stats.count
        assert timed >= 1
        store.flush()  # nothing new to make durable
        assert store.fsync_stats.count == timed
