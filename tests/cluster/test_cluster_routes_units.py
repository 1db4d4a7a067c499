"""``ClusterRoutes`` against name servers that are down, answer garbage or answer a route: a
small asyncio server speaking remoting frames stands in for the name server's failure modes
(the real name server is in test_cluster_routes.py)."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from rmq_spark.broker.cluster.routes import ClusterRoutes
from rmq_spark.broker.remoting.codec import (
    NeedMoreData,
    RemotingCommand,
    decode_frame,
    encode_frame,
)

ROUTE = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10910"},"brokerName":"broker-a",'
    b'"cluster":"C"}],"filterServerTable":{"127.0.0.1:10910":["grpc://127.0.0.1:10911"]},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":2,"writeQueueNums":2}]}'
)


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _serve(answer: tuple[int, bytes], asked: list[str]) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buffer = b""
        while chunk := await reader.read(65536):
            buffer += chunk
            outcome = decode_frame(buffer)
            if isinstance(outcome, NeedMoreData):
                continue
            request, used = outcome
            buffer = buffer[used:]
            asked.append(request.ext_fields["topic"])
            code, body = answer
            reply = RemotingCommand(code=code, opaque=request.opaque, flag=1, body=body)
            writer.write(encode_frame(reply))
            await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_failed_name_server_is_skipped_a_while_and_answers_cached(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        bad_asked: list[str] = []
        asked: list[str] = []
        bad = await _serve((0, b"garbage"), bad_asked)
        good = await _serve((0, ROUTE), asked)
        now = [0.0]
        addresses = tuple(("127.0.0.1", s.sockets[0].getsockname()[1]) for s in (bad, good))
        routes = ClusterRoutes(addresses, 8081, monotonic=lambda: now[0])
        found = await routes.lookup("T")
        assert found is not None and [(r.broker_name, r.grpc_port) for r in found] == [
            ("broker-a", 10911)
        ]
        assert await routes.lookup("T") == found and asked == ["T"]  # cached
        now[0] += 3.1  # past the cache; the failed one is still skipped
        assert await routes.lookup("T") == found and (bad_asked, asked) == (["T"], ["T", "T"])
        now[0] += 5.0  # tried again
        assert await routes.lookup("T") == found and bad_asked == ["T", "T"]
        await routes.close()
        bad.close()
        good.close()

    with caplog.at_level(logging.INFO, logger="rmq_spark.broker.cluster"):
        asyncio.run(scenario())
    assert caplog.text.count("route look-up failed: not a TopicRouteData") == 1


def test_a_name_server_that_is_down_means_no_answer() -> None:
    async def scenario() -> None:
        routes = ClusterRoutes((("127.0.0.1", _dead_port()),), 8081)
        assert await routes.lookup("T") is None
        await routes.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(("code", "body"), [(0, b"garbage"), (1, b""), (0, b"[1]")])
def test_garbage_or_an_error_means_no_answer(code: int, body: bytes) -> None:
    async def scenario() -> None:
        server = await _serve((code, body), [])
        port = server.sockets[0].getsockname()[1]
        routes = ClusterRoutes((("127.0.0.1", port),), 8081)
        assert await routes.lookup("T") is None
        await routes.close()
        server.close()

    asyncio.run(scenario())


def test_topic_not_exist_is_an_empty_route() -> None:
    async def scenario() -> None:
        server = await _serve((17, b""), [])
        routes = ClusterRoutes((("127.0.0.1", server.sockets[0].getsockname()[1]),), 8081)
        assert await routes.lookup("T") == ()
        await routes.close()
        server.close()

    asyncio.run(scenario())
