"""``async_puts.py``: the ``put_async`` calls of one loop pass written as one batch."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from store_helpers import open_store

from rmq_spark.store.async_puts import AsyncPuts
from rmq_spark.store.config import FlushPolicy
from rmq_spark.store.put import PutRequest, PutResult, PutStatus


@pytest.mark.parametrize("io_uring", [False, True], ids=["flush-thread", "io_uring"])
def test_the_puts_of_one_loop_pass_are_one_batch_covered_by_one_fsync(
    tmp_path: Path, io_uring: bool
) -> None:
    store = open_store(
        tmp_path, flush_policy=FlushPolicy.SYNC, io_uring=io_uring, segment_size_bytes=1 << 20
    )
    group = store._durability.group  # noqa: SLF001 - white-box: how many fsyncs
    fsyncs_before = group.fsync_count

    async def main() -> list[PutResult]:
        return await asyncio.gather(
            *(store.put_async(PutRequest("A", b"m%d" % i, queue_id=i % 4)) for i in range(200))
        )

    results = asyncio.run(main())
    assert all(result.ok for result in results)
    assert group.fsync_count - fsyncs_before == 1
    assert [store.read(r.physical_offset).body for r in results] == [b"m%d" % i for i in range(200)]
    assert sorted(r.queue_offset for r in results if r.queue_id == 1) == list(range(50))
    store.close()


@pytest.mark.parametrize("policy", [FlushPolicy.SYNC, FlushPolicy.ASYNC])
def test_an_illegal_message_among_a_pass_refuses_only_its_own_put(
    tmp_path: Path, policy: FlushPolicy
) -> None:
    store = open_store(tmp_path, flush_policy=policy)
    requests = [PutRequest("A", b"a"), PutRequest("A", b"b", queue_id=-1), PutRequest("A", b"c")]

    async def main() -> list[PutResult]:
        return await asyncio.gather(*(store.put_async(request) for request in requests))

    first, bad, last = asyncio.run(main())
    assert bad.status is PutStatus.MESSAGE_ILLEGAL and "batch" not in bad.detail
    assert first.ok and last.ok
    assert [store.read(r.physical_offset).body for r in (first, last)] == [b"a", b"c"]
    store.close()


def test_repeats_of_one_idempotent_message_in_one_pass_are_stored_once(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC)
    twice = PutRequest("A", b"x", properties={"UNIQ_KEY": "K1"}, idempotent=True)

    async def main() -> list[PutResult]:
        return await asyncio.gather(store.put_async(twice), store.put_async(twice))

    first, repeat = asyncio.run(main())
    assert first.ok and repeat.ok
    assert repeat.physical_offset == first.physical_offset
    assert store.queue_offset("A", 0) == 1
    store.close()


def test_a_put_cancelled_before_its_batch_is_written_leaves_the_others_acknowledged(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC)

    async def main() -> tuple[list[PutResult], bool]:
        tasks = [
            asyncio.ensure_future(store.put_async(PutRequest("A", b"%d" % i))) for i in range(3)
        ]
        await asyncio.sleep(0)  # the three joined their pass's batch; not written yet
        tasks[1].cancel()
        done = await asyncio.gather(tasks[0], tasks[2])
        try:
            await tasks[1]
        except asyncio.CancelledError:
            return list(done), True
        return list(done), False

    results, cancelled = asyncio.run(main())
    assert cancelled and all(result.ok for result in results)
    assert store.queue_offset("A", 0) == 3  # the cancelled put's record is stored, unacknowledged
    store.close()


def test_a_batch_past_its_byte_bound_is_written_without_waiting_for_the_pass_end(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.ASYNC)  # 4 KiB segments: 1 KiB batches
    large = b"x" * 1000

    async def main() -> tuple[int, PutResult]:
        task = asyncio.ensure_future(store.put_async(PutRequest("A", large)))
        await asyncio.sleep(0)  # the put ran; the pass has not ended
        written = store.max_offset
        return written, await task

    written, result = asyncio.run(main())
    assert result.ok and written >= len(large)
    store.close()


def test_puts_of_a_closed_store_are_refused_not_left_waiting(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC)

    async def main() -> PutResult:
        pending = asyncio.ensure_future(store.put_async(PutRequest("A", b"late")))
        await asyncio.sleep(0)  # joined the batch, not written
        store.close()
        return await asyncio.wait_for(pending, 10)

    result = asyncio.run(main())
    assert result.status is PutStatus.SERVICE_NOT_AVAILABLE


def test_a_failed_wait_for_durability_reaches_every_put_of_the_batch(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC)

    async def broken(results: list[PutResult], end: int) -> None:
        raise OSError("durability unreachable")

    puts = AsyncPuts(store._appender, broken, lambda: None)  # noqa: SLF001 - the store's appender

    async def main() -> list[BaseException | PutResult]:
        futures = [puts.put(PutRequest("A", b"%d" % i)) for i in range(3)]
        return await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 10)

    outcomes = asyncio.run(main())
    assert [str(o) for o in outcomes] == ["durability unreachable"] * 3  # none left waiting
    store.close()
