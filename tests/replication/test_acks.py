"""``SlaveAcks``: a SYNC_MASTER's sends waiting for a slave's report, on their event loop."""

from __future__ import annotations

import asyncio
import threading

from rmq_spark.broker.replication.acks import SlaveAcks
from rmq_spark.broker.send_model import SendCode


def _connected(timeout_s: float = 5.0) -> SlaveAcks:
    acks = SlaveAcks(timeout_s)
    acks.connected()
    return acks


def test_a_report_on_the_sends_own_loop_releases_it() -> None:
    acks = _connected()

    async def main() -> SendCode:
        waiting = asyncio.ensure_future(acks.wait_async(100))
        await asyncio.sleep(0)  # registered
        acks.report(100)  # as the HA port, served on this loop, reads it
        return await waiting

    assert asyncio.run(main()) is SendCode.OK


def test_a_report_from_another_thread_releases_it() -> None:
    acks = _connected()

    async def main() -> SendCode:
        waiting = asyncio.ensure_future(acks.wait_async(100))
        await asyncio.sleep(0)
        reporter = threading.Thread(target=acks.report, args=(150,))
        reporter.start()
        code = await waiting
        reporter.join()
        return code

    assert asyncio.run(main()) is SendCode.OK


def test_no_report_in_time_is_flush_slave_timeout() -> None:
    acks = _connected(timeout_s=0.05)
    assert asyncio.run(acks.wait_async(100)) is SendCode.FLUSH_SLAVE_TIMEOUT
    assert not acks.waiting


def test_releasing_a_send_whose_loop_has_closed_is_quiet() -> None:
    # A broker stopping while a send waits: its task is cancelled and its loop closed before
    # the replication stops and releases every waiter.
    acks = _connected()
    loop = asyncio.new_event_loop()
    waiting = loop.create_task(acks.wait_async(100))
    loop.run_until_complete(asyncio.sleep(0))
    waiting.cancel()
    loop.run_until_complete(asyncio.gather(waiting, return_exceptions=True))
    assert not acks.waiting  # the cancelled send left the list
    dropped = loop.create_task(acks.wait_async(200))  # one its closing loop leaves waiting
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    assert acks.waiting
    acks.release_all()  # raised RuntimeError("Event loop is closed")
    assert not acks.waiting and not dropped.done()  # the closed loop never runs it again
