"""``put_async`` / ``put_batch_async``: asyncio producers, SYNC group commit, real fsync."""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from store_helpers import GatedOpener, open_store, ring_available

from rmq_spark.store.async_commit import WAVE_SIZE, AsyncGroupCommit
from rmq_spark.store.checkpoint import read_checkpoint
from rmq_spark.store.config import FlushPolicy
from rmq_spark.store.fileio import FaultPlan, FaultyOpener, FileKind, OsOpener, SegmentFile
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest, PutResult, PutStatus


async def _durable_put(store: MessageStore, root: Path, body: bytes) -> PutResult:
    """``put_async``; checks, the moment it returns, that an fsync and the checkpoint cover
    the record when it says ``PUT_OK``."""
    result = await store.put_async(PutRequest("A", body))
    if result.ok:
        end = result.physical_offset + result.total_size
        assert store.flushed_offset >= end
        values = read_checkpoint(root)
        assert values is not None
        assert values.master_flushed_offset >= end and values.confirm_phy_offset >= end
    return result


def test_sync_put_async_is_acknowledged_only_after_an_fsync_covers_it(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC)

    async def main() -> list[PutResult]:
        first = await _durable_put(store, tmp_path, b"first")
        rest = await asyncio.gather(*(_durable_put(store, tmp_path, b"m%d" % i) for i in range(40)))
        return [first, *rest]

    results = asyncio.run(main())
    assert all(result.status is PutStatus.PUT_OK for result in results)
    assert sorted(r.queue_offset for r in results) == list(range(41))
    store.close()
    store = open_store(tmp_path)
    assert {store.read(r.physical_offset).body for r in results[1:]} == {
        b"m%d" % i for i in range(40)
    }
    store.close()


class _SlowFsyncFile:
    """A segment whose fsync takes a millisecond longer: a put resolved before its fsync
    ended would resume while the fsync still sleeps."""

    def __init__(self, inner: SegmentFile) -> None:
        self._inner = inner
        self.path = inner.path

    def fsync(self) -> None:
        time.sleep(0.001)
        self._inner.fsync()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _SlowFsyncOpener:
    def __init__(self) -> None:
        self._inner = OsOpener()

    def open(self, path: Path, kind: FileKind, *, read_only: bool = False) -> SegmentFile:
        file = self._inner.open(path, kind, read_only=read_only)
        return _SlowFsyncFile(file) if kind is FileKind.SEGMENT else file  # type: ignore[return-value]

    def create(self, path: Path, size_bytes: int, kind: FileKind) -> SegmentFile:
        file = self._inner.create(path, size_bytes, kind)
        return _SlowFsyncFile(file) if kind is FileKind.SEGMENT else file  # type: ignore[return-value]


@pytest.mark.parametrize("wave_size", [1, 5, WAVE_SIZE])
def test_no_put_async_of_many_producers_resolves_before_the_fsync_that_covers_it(
    tmp_path: Path, wave_size: int
) -> None:
    store = open_store(
        tmp_path,
        opener=_SlowFsyncOpener(),
        flush_policy=FlushPolicy.SYNC,
        segment_size_bytes=1 << 16,
    )
    commit = AsyncGroupCommit(store._durability.group, 10_000, wave_size)  # noqa: SLF001 - the wave size
    store._durability._async_commit = commit  # noqa: SLF001

    async def producer(index: int) -> list[PutResult]:
        return [await _durable_put(store, tmp_path, b"p%d-%d" % (index, i)) for i in range(8)]

    async def main() -> list[list[PutResult]]:
        return await asyncio.gather(*(producer(index) for index in range(64)))

    per_producer = asyncio.run(main())
    results = [result for results in per_producer for result in results]
    assert all(result.status is PutStatus.PUT_OK for result in results)
    assert len({result.physical_offset for result in results}) == 64 * 8
    assert store._durability.group.fsync_count > 1  # noqa: SLF001 - several groups, not one
    store.close()
    store = open_store(tmp_path, segment_size_bytes=1 << 16)
    for index, results in enumerate(per_producer):
        bodies = [store.read(result.physical_offset).body for result in results]
        assert bodies == [b"p%d-%d" % (index, i) for i in range(8)]
    store.close()


def test_a_wave_goes_to_the_flush_thread_once_it_has_wave_size_puts(tmp_path: Path) -> None:
    opener = GatedOpener()
    store = open_store(tmp_path, opener=opener, flush_policy=FlushPolicy.SYNC)
    store._durability._async_commit = AsyncGroupCommit(store._durability.group, 10_000, 3)  # noqa: SLF001
    opener.release.clear()
    opener.fsync_entered.clear()

    async def blocking_probe() -> bool:
        """Runs in the same loop pass as the three puts, after them, and blocks the loop:
        only a wave handed over before the pass ends can have its fsync started."""
        return opener.fsync_entered.wait(10)

    async def main() -> tuple[list[list[PutResult]], bool]:
        tasks = [  # put_async's of one pass are one batch: one wait; put_batch_async's are not
            asyncio.ensure_future(store.put_batch_async([PutRequest("A", b"%d" % i)]))
            for i in range(3)
        ]
        entered = await asyncio.ensure_future(blocking_probe())
        opener.release.set()
        return list(await asyncio.gather(*tasks)), entered

    batches, entered = asyncio.run(main())
    assert entered and all(batch[0].ok for batch in batches)
    store.close()


@pytest.mark.parametrize("io_uring", [False, True], ids=["flush-thread", "io_uring"])
def test_concurrent_put_async_calls_share_one_fsync_and_one_loop_wake_up(
    tmp_path: Path, io_uring: bool
) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC, io_uring=io_uring)
    fsyncs_before = store._durability.group.fsync_count  # noqa: SLF001 - white-box: the grouping

    async def main() -> list[PutResult]:
        return await asyncio.gather(
            *(store.put_async(PutRequest("A", b"m%d" % i)) for i in range(32))
        )

    results = asyncio.run(main())
    assert all(result.ok for result in results)
    commit = store._durability._async_commit  # noqa: SLF001
    assert commit is not None
    if io_uring and ring_available():  # the loop fsyncs itself: no thread hands anything back
        assert commit._ring is not None and commit.groups == 0  # noqa: SLF001
    else:
        assert commit._ring is None and commit.groups == 1  # one call_soon_threadsafe  # noqa: SLF001
    assert store._durability.group.fsync_count - fsyncs_before == 1  # noqa: SLF001
    store.close()


def test_async_store_put_async_returns_without_a_flush_thread(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    result = asyncio.run(store.put_async(PutRequest("A", b"x")))
    assert result.ok and store.read(result.physical_offset).body == b"x"
    assert store._durability._async_commit is None  # noqa: SLF001
    store.close()


def test_sync_put_batch_async_waits_for_one_fsync_over_the_whole_batch(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC)
    requests = [PutRequest("A", b"b%d" % i, queue_id=i % 2) for i in range(10)]
    requests.append(PutRequest("B", b"general", keys=("k",)))  # the general path too

    async def main() -> tuple[list[PutResult], int]:
        results = await store.put_batch_async(requests)
        return results, store.flushed_offset

    results, flushed = asyncio.run(main())
    assert all(result.ok for result in results)
    assert flushed >= max(r.physical_offset + r.total_size for r in results)
    refused = asyncio.run(store.put_batch_async([PutRequest("A", b"x"), PutRequest("a b", b"")]))
    assert all(result.status is not PutStatus.PUT_OK for result in refused)
    store.close()


def test_a_put_async_no_fsync_covers_in_time_gets_flush_disk_timeout_and_stays_stored(
    tmp_path: Path,
) -> None:
    opener = GatedOpener()
    store = open_store(
        tmp_path, opener=opener, flush_policy=FlushPolicy.SYNC, sync_flush_timeout_ms=20
    )
    opener.release.clear()  # every fsync blocks until the test opens the gate
    try:
        result = asyncio.run(store.put_async(PutRequest("A", b"late")))
    finally:
        opener.release.set()
    assert result.status is PutStatus.FLUSH_DISK_TIMEOUT and "20 ms" in result.detail
    assert store.read(result.physical_offset).body == b"late"
    store.close()


def test_cancelling_one_waiting_put_async_leaves_the_others_of_its_wave_acknowledged(
    tmp_path: Path,
) -> None:
    opener = GatedOpener()
    store = open_store(tmp_path, opener=opener, flush_policy=FlushPolicy.SYNC)
    opener.release.clear()
    opener.fsync_entered.clear()

    async def main() -> tuple[list[PutResult], bool]:
        tasks = [
            asyncio.ensure_future(store.put_async(PutRequest("A", b"%d" % i))) for i in range(3)
        ]
        await asyncio.get_running_loop().run_in_executor(None, opener.fsync_entered.wait, 10)
        tasks[1].cancel()
        opener.release.set()
        done = await asyncio.gather(tasks[0], tasks[2])
        try:
            await tasks[1]
        except asyncio.CancelledError:
            return list(done), True
        return list(done), False

    results, cancelled = asyncio.run(main())
    assert cancelled and all(result.ok for result in results)
    store.close()


@pytest.mark.parametrize("failpoint", ["append", "fsync"])
def test_enospc_gives_put_async_an_error_status_and_loses_no_acknowledged_message(
    tmp_path: Path, failpoint: str
) -> None:
    plan = FaultPlan(failpoint, after=3, times=1, error=errno.ENOSPC)
    store = open_store(tmp_path, opener=FaultyOpener(plan), flush_policy=FlushPolicy.SYNC)

    async def main() -> list[PutResult]:
        return [await store.put_async(PutRequest("A", b"m%d" % i)) for i in range(6)]

    results = asyncio.run(main())
    failed = [r for r in results if not r.ok]
    assert failed and failed[0].status is PutStatus.UNKNOWN_ERROR
    assert "No space left" in failed[0].detail
    if failpoint == "fsync":  # the data may be lost: the store fails closed
        assert store.failure is not None
        assert failed[1:] and all(r.status is PutStatus.SERVICE_NOT_AVAILABLE for r in failed[1:])
    acknowledged = [r for r in results if r.ok]
    store.close()
    store = open_store(tmp_path)
    assert [store.read(r.physical_offset).body for r in acknowledged] == [
        b"m%d" % i for i, r in enumerate(results) if r.ok
    ]
    store.close()


def test_thread_and_asyncio_producers_share_the_group_commit(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC)
    thread_results: list[PutResult] = []

    def produce() -> None:
        for i in range(50):
            thread_results.append(store.put(PutRequest("T", b"t%d" % i)))

    async def main() -> list[PutResult]:
        async def one(i: int) -> PutResult:
            return await _durable_put(store, tmp_path, b"a%d" % i)

        out = []
        for round_ in range(10):
            out += await asyncio.gather(*(one(round_ * 5 + i) for i in range(5)))
        return out

    thread = threading.Thread(target=produce)
    thread.start()
    results = asyncio.run(main())
    thread.join()
    assert all(result.ok for result in results + thread_results)
    assert store.queue_offset("T", 0) == 50 and store.queue_offset("A", 0) == 50
    store.close()


def test_close_answers_puts_still_waiting_and_later_waves_resolve_at_once(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC)

    async def main() -> PutResult:
        pending = asyncio.ensure_future(store.put_async(PutRequest("A", b"x")))
        await asyncio.sleep(0)  # the put joined its pass's batch
        await asyncio.sleep(0)  # the batch written, its wave not closed yet
        store.close()  # flushes everything written, then stops the flush thread
        return await pending

    result = asyncio.run(main())
    assert result.ok
    store = open_store(tmp_path)
    assert store.read(result.physical_offset).body == b"x"
    store.close()


def test_an_async_store_flushes_and_publishes_its_end_on_its_own(tmp_path: Path) -> None:
    # Without a final close: the housekeeper's periodic fsync makes ASYNC puts survive a crash
    # of the machine, and the published confirmPhyOffset is where readers of a live store
    # (the Spark source) stop.
    from rmq_spark.store.checkpoint import CheckpointValues, read_checkpoint
    from rmq_spark.store.config import FlushPolicy
    from rmq_spark.store.put import PutRequest

    def published() -> int:
        values: CheckpointValues | None = read_checkpoint(tmp_path)
        return values.confirm_phy_offset if values is not None else -1

    store = open_store(
        tmp_path, flush_policy=FlushPolicy.ASYNC, flush_interval_ms=20,
        confirm_publish_interval_ms=20,
    )  # fmt: skip
    try:
        end = store.put(PutRequest("T", b"x" * 100)).physical_offset + 1
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
            store.flushed_offset >= end and published() >= end
        ):
            time.sleep(0.01)
        assert store.flushed_offset >= end, "no periodic fsync"
        assert published() >= end, "confirmPhyOffset not published"
    finally:
        store.abandon()
