"""bench/peers/profile_broker.py puts each py-spy stack in the layer of its innermost own frame."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("stack", "layer"),
    [
        (
            "Thread._bootstrap (threading.py:1002);GrpcEndpoint._run (rmq_spark/broker/server.py:1)"
            ";BaseEventLoop._run_once (asyncio/base_events.py:1);Handle._run (asyncio/events.py:8)",
            "gRPC aio + asyncio machinery (C extension, event loop, selector)",
        ),
        (
            "BaseEventLoop._run_once (asyncio/base_events.py:1);Handle._run (asyncio/events.py:80)"
            ";MessagingServicer._guard (rmq_spark/broker/grpc/grpc_api.py:261)"
            ";Appender.append (rmq_spark/store/appender.py:142);prepare (rmq_spark/store/put.py:3)"
            ";encode_properties (rmq_spark/store/properties.py:161)",
            "store: put (encode, CRC, append)",
        ),
        (
            "Handle._run (asyncio/events.py:80);RingCommit.pump (rmq_spark/store/ring_commit.py:9)",
            "store: group commit + fdatasync (io_uring)",
        ),
        (
            "Handle._run (asyncio/events.py:80);SendMessage (rmq_spark/broker/grpc/grpc_api.py:331)"
            ";BrokerService.send_async (rmq_spark/broker/service.py:324)",
            "broker: service and the rest of broker/",
        ),
        (
            "Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982)",
            "other Python threads (no frame of ours)",
        ),  # fmt: skip
    ],
)
def test_classify(stack: str, layer: str) -> None:
    from profile_broker import classify  # bench/peers is on sys.path (conftest.py)

    assert classify(stack.split(";")) == layer
