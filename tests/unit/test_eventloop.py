"""``eventloop.py``: which loop the broker serves on; SYNC ``put_async`` on uvloop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import uvloop
from store_helpers import open_store, ring_available

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.eventloop import new_event_loop, uvloop_available
from rmq_spark.store.config import FlushPolicy
from rmq_spark.store.put import PutRequest


def test_auto_is_uvloop_where_installed_and_each_kind_can_be_forced() -> None:
    assert uvloop_available()  # a dependency of the project
    for kind, expected in (("auto", uvloop.Loop), ("uvloop", uvloop.Loop)):
        loop = new_event_loop(kind)
        try:
            assert isinstance(loop, expected)
        finally:
            loop.close()
    loop = new_event_loop("asyncio")
    try:
        assert isinstance(loop, asyncio.BaseEventLoop) and not isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_the_broker_serves_on_asyncio_s_loop_unless_told_otherwise() -> None:
    assert BrokerConfig().event_loop == "asyncio"
    assert BrokerConfig(event_loop="uvloop").event_loop == "uvloop"


def test_an_unknown_loop_kind_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="must be one of auto, asyncio, uvloop"):
        new_event_loop("trio")
    with pytest.raises(ValueError, match="event_loop: must be one of"):
        BrokerConfig(event_loop="trio")


def test_sync_put_async_on_uvloop_fsyncs_through_the_loop_and_is_durable(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC, segment_size_bytes=1 << 16)

    async def main() -> list[int]:
        results = await asyncio.gather(
            *(store.put_async(PutRequest("A", b"u%d" % i)) for i in range(200))
        )
        assert all(result.ok for result in results)
        for result in results:
            assert store.flushed_offset >= result.physical_offset + result.total_size
        return [result.physical_offset for result in results]

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        offsets = runner.run(main())
    commit = store._durability._async_commit  # noqa: SLF001 - white-box: which path ran
    assert commit is not None
    assert (commit._ring is not None) == ring_available()  # noqa: SLF001
    store.close()
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC, segment_size_bytes=1 << 16)
    assert sorted(store.read(offset).body for offset in offsets) == sorted(
        b"u%d" % i for i in range(200)
    )
    store.close()
