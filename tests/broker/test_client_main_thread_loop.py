"""The official Python client starts in a test worker whose main thread lost its event loop.

The client builds its telemetry stream's gRPC call on whichever thread runs the route
answer's callback: its I/O thread, or the main thread when the answer came before the
callback was added. grpc.aio then asks asyncio for that thread's loop. Once a test in the
same worker has run ``asyncio.run`` (unit tests and the cluster-discovery code do), the main
thread has none, and a client started later failed at random ("failed to fetch topic route",
logged as "There is no current event loop in thread 'MainThread'"). The root conftest gives
every test a main-thread loop; this test takes the main-thread path on purpose."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from broker_harness import BrokerProcess


def test_a_client_builds_its_stream_on_the_main_thread_after_an_asyncio_run(
    broker_factory: Callable[..., BrokerProcess], official_producer: Callable[..., Any]
) -> None:
    asyncio.run(asyncio.sleep(0))  # what an earlier test in this worker may have done
    broker = broker_factory()
    producer = official_producer(broker.address, ("orders",))
    endpoints = producer.client_configuration.rpc_endpoints
    # The route callback's path when it runs on the main thread.
    channel = producer.rpc_client.telemetry_stream(endpoints, producer, producer.sign(), True)
    assert channel.telemetry_stream_stream_call is not None
