"""``BrokerService.send_async`` (what the gRPC SendMessage handler awaits) over a real store:
the same acknowledgement as ``send`` (SYNC: only after an fsync covered the record), flush
timeouts and write failures as status codes, refusals unchanged."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

from store_helpers import GatedOpener, open_store

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.service import BrokerService, MessageKind, SendCode, SendCommand, SendOutcome
from rmq_spark.store.config import FlushPolicy
from rmq_spark.store.fileio import FaultPlan, FaultyOpener
from rmq_spark.store.message_store import MessageStore


def _command(index: int, body: bytes = b"payload") -> SendCommand:
    return SendCommand(
        topic="Orders", body=body, message_id=f"MID-{index:04d}", kind=MessageKind.NORMAL
    )


def _service(store: MessageStore) -> BrokerService:
    return BrokerService(store, BrokerConfig(default_queue_count=4), max_message_size_bytes=1024)


def test_a_sync_send_async_is_ok_only_once_an_fsync_covers_the_record(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC)
    service = _service(store)

    async def send(index: int) -> tuple[SendOutcome, int]:
        outcome = await service.send_async(_command(index))
        return outcome, store.flushed_offset  # the moment the send is acknowledged

    async def main() -> list[tuple[SendOutcome, int]]:
        return await asyncio.gather(*(send(index) for index in range(24)))

    for outcome, flushed in asyncio.run(main()):
        assert outcome.code is SendCode.OK
        record = store.read(outcome.physical_offset)
        assert record.body == b"payload"
        end = outcome.physical_offset + store.read_decoded(outcome.physical_offset).total_size
        assert flushed >= end
    assert service.wait_idle(0)
    store.close()


def test_send_async_without_an_fsync_in_time_is_a_flush_timeout(tmp_path: Path) -> None:
    opener = GatedOpener()
    store = open_store(
        tmp_path, opener=opener, flush_policy=FlushPolicy.SYNC, sync_flush_timeout_ms=20
    )
    opener.release.clear()
    try:
        outcome = asyncio.run(_service(store).send_async(_command(1)))
    finally:
        opener.release.set()
    assert outcome.code is SendCode.FLUSH_TIMEOUT and "FLUSH_DISK_TIMEOUT" in outcome.reason
    store.close()


def test_a_write_or_fsync_failure_is_a_store_error_and_acknowledged_sends_survive(
    tmp_path: Path,
) -> None:
    for failpoint in ("append", "fsync"):
        root = tmp_path / failpoint
        plan = FaultPlan(failpoint, after=2, times=1, error=errno.ENOSPC)
        store = open_store(root, opener=FaultyOpener(plan), flush_policy=FlushPolicy.SYNC)
        service = _service(store)

        async def main(service: BrokerService = service) -> list[SendOutcome]:
            return [await service.send_async(_command(index)) for index in range(4)]

        outcomes = asyncio.run(main())
        assert [o.code for o in outcomes[:2]] == [SendCode.OK, SendCode.OK]
        assert outcomes[2].code is SendCode.STORE_ERROR and "No space left" in outcomes[2].reason
        store.close()
        store = open_store(root)
        for outcome in outcomes[:2]:
            assert store.read(outcome.physical_offset).body == b"payload"
        store.close()


def test_send_async_refuses_what_send_refuses_without_storing_it(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC)
    service = _service(store)
    bad = [_command(1, body=b""), _command(2, body=b"x" * 2000)]

    async def main() -> list[SendOutcome]:
        return [await service.send_async(command) for command in bad]

    assert [o.code for o in asyncio.run(main())] == [o.code for o in map(service.send, bad)]
    assert store.max_offset == 0
    service.begin_shutdown()
    refused = asyncio.run(service.send_async(_command(3)))
    assert refused.code is SendCode.SHUTTING_DOWN and store.max_offset == 0
    store.close()


def test_a_retried_message_id_sent_async_is_stored_once(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC)
    service = _service(store)

    async def main() -> list[SendOutcome]:
        return [await service.send_async(_command(7)) for _ in range(3)]

    first, *again = asyncio.run(main())
    assert first.code is SendCode.OK and all(o.duplicate for o in again)
    assert {o.physical_offset for o in again} == {first.physical_offset}
    store.close()
