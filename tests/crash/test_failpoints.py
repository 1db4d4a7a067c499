"""Injected file failures (ENOSPC, EIO) give the producer an error status and never a hole."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from store_helpers import open_store, put_many

from rmq_spark.errors import StoreIOError
from rmq_spark.store.config import FlushPolicy
from rmq_spark.store.fileio import FaultPlan, FaultyOpener
from rmq_spark.store.put import PutRequest, PutStatus


def _reopen_and_check(root: Path, acknowledged: list) -> None:
    """Reopen with healthy files: every acknowledged record is there, in order, no hole."""
    store = open_store(root)
    try:
        for result in acknowledged:
            assert store.read(result.physical_offset).queue_offset == result.queue_offset
        offsets = [r.physical_offset for r in acknowledged]
        assert offsets == sorted(offsets)
        assert store.max_offset == acknowledged[-1].physical_offset + acknowledged[-1].total_size
        assert store.queue_offset("TopicTest", 0) == len(acknowledged)
    finally:
        store.close()


def test_enospc_on_append_fails_the_put_and_the_store_stays_usable(tmp_path: Path) -> None:
    plan = FaultPlan("append", after=3, times=1, error=errno.ENOSPC)
    store = open_store(tmp_path, opener=FaultyOpener(plan))
    acknowledged = put_many(store, 3)
    failed = store.put(PutRequest("TopicTest", b"lost"))
    assert failed.status is PutStatus.UNKNOWN_ERROR
    assert "No space left" in failed.detail
    assert store.failure is None
    acknowledged += put_many(store, 2, start=3)
    assert (
        acknowledged[3].physical_offset
        == acknowledged[2].physical_offset + acknowledged[2].total_size
    )
    assert acknowledged[3].queue_offset == 3
    store.close()
    _reopen_and_check(tmp_path, acknowledged)


def test_torn_append_that_cannot_be_undone_fails_closed_and_recovers(tmp_path: Path) -> None:
    plan = FaultPlan("append", after=4, error=errno.EIO, partial_bytes=44)
    store = open_store(tmp_path, opener=FaultyOpener(plan))
    acknowledged = put_many(store, 4)
    failed = store.put(PutRequest("TopicTest", b"x" * 100))
    assert failed.status is PutStatus.UNKNOWN_ERROR
    assert store.failure is not None
    refused = store.put(PutRequest("TopicTest", b"after"))
    assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert "failed closed" in refused.detail
    batch = store.put_batch([PutRequest("TopicTest", b"b")])
    assert batch[0].status is PutStatus.SERVICE_NOT_AVAILABLE
    assert store.read(acknowledged[-1].physical_offset).queue_offset == 3  # reads still work
    store.close()
    assert (tmp_path / "abort").exists()  # the next open recovers
    reopened = open_store(tmp_path)
    assert reopened.recovery_report.truncated_bytes == 44  # ends inside BORNTIMESTAMP
    reopened.close()
    _reopen_and_check(tmp_path, acknowledged)


def test_failed_roll_reports_create_mapped_file_failed_and_retries_later(tmp_path: Path) -> None:
    plan = FaultPlan("roll", after=1, times=1)
    store = open_store(tmp_path, opener=FaultyOpener(plan))
    acknowledged = []
    for _ in range(100):  # fill the first segment until the next put needs a new one
        result = store.put(PutRequest("TopicTest", b"y" * 200))
        if not result.ok:
            break
        acknowledged.append(result)
    assert result.status is PutStatus.CREATE_MAPPED_FILE_FAILED, len(acknowledged)
    assert "roll" in result.detail
    assert len(store.commitlog.segments) == 1
    acknowledged += put_many(store, 5, body_size=200, start=len(acknowledged))
    assert acknowledged[-1].physical_offset >= 4096
    store.close()
    _reopen_and_check(tmp_path, acknowledged)


def test_failed_batch_write_stores_none_of_it(tmp_path: Path) -> None:
    plan = FaultPlan("append", after=2, times=1)
    store = open_store(tmp_path, opener=FaultyOpener(plan))
    acknowledged = put_many(store, 2)
    results = store.put_batch([PutRequest("TopicTest", b"b%d" % i) for i in range(3)])
    assert all(r.status is PutStatus.UNKNOWN_ERROR for r in results)
    assert store.queue_offset("TopicTest", 0) == 2
    acknowledged += put_many(store, 1, start=2)
    store.close()
    _reopen_and_check(tmp_path, acknowledged)


def test_fsync_failure_in_sync_mode_fails_the_put_and_the_store(tmp_path: Path) -> None:
    plan = FaultPlan("fsync", after=3, error=errno.EIO)
    store = open_store(tmp_path, opener=FaultyOpener(plan), flush_policy=FlushPolicy.SYNC)
    acknowledged = put_many(store, 3)
    failed = store.put(PutRequest("TopicTest", b"not durable"))
    assert failed.status is PutStatus.UNKNOWN_ERROR and "fsync failed" in failed.detail
    assert store.put(PutRequest("TopicTest", b"x")).status is PutStatus.SERVICE_NOT_AVAILABLE
    store.close()
    store = open_store(tmp_path)
    for result in acknowledged:
        assert store.read(result.physical_offset).queue_offset == result.queue_offset
    store.close()


def test_checkpoint_write_failure_in_sync_mode_is_an_error_status(tmp_path: Path) -> None:
    plan = FaultPlan("checkpoint", after=4, error=errno.EIO)
    store = open_store(tmp_path, opener=FaultyOpener(plan), flush_policy=FlushPolicy.SYNC)
    statuses = [store.put(PutRequest("TopicTest", b"m%d" % i)).status for i in range(6)]
    assert PutStatus.PUT_OK in statuses
    assert statuses[-1] is not PutStatus.PUT_OK
    assert store.failure is not None
    store.close()
    open_store(tmp_path).close()


def test_fsync_failure_in_async_flush_raises_and_fails_closed(tmp_path: Path) -> None:
    plan = FaultPlan("fsync", error=errno.EIO)
    store = open_store(tmp_path, opener=FaultyOpener(plan))
    put_many(store, 2)
    with pytest.raises(StoreIOError, match="flushing"):
        store.flush()
    assert store.put(PutRequest("TopicTest", b"x")).status is PutStatus.SERVICE_NOT_AVAILABLE
    store.close()


def test_truncate_failure_during_recovery_refuses_to_open(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 3)
    store.abandon()
    segment = tmp_path / "commitlog" / "00000000000000000000"
    with segment.open("r+b") as handle:  # a torn last record
        handle.seek(results[-1].physical_offset + 100)
        handle.write(bytes(results[-1].total_size - 100))
    with pytest.raises(StoreIOError, match="truncate"):
        open_store(tmp_path, opener=FaultyOpener(FaultPlan("truncate")))
    store = open_store(tmp_path)
    assert store.recovery_report.truncated_bytes == 100
    store.close()
