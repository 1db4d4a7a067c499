"""The front alone (``broker/front.py``), with two asyncio echo servers standing for grpc's
TLS and plaintext listeners: the first byte picks the listener, bytes pass both ways, the
client's own address is what ``client_peer`` gives for grpc's view of the connection, and a
plaintext HTTP/2 client under ``enforcing`` gets a trailers-only ``grpc-status: 14``.
"""

from __future__ import annotations

import asyncio

from rmq_spark.broker.front import Front, FrontSettings


class _Echo:
    """An echo server that records the peer address of every connection."""

    def __init__(self, tag: bytes) -> None:
        self.tag = tag
        self.peers: list[tuple[str, int]] = []
        self.port = 0

    async def start(self) -> None:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.peers.append(writer.get_extra_info("peername")[:2])
        while data := await reader.read(65536):
            writer.write(self.tag + data)
            await writer.drain()
        writer.close()


async def _front(tls: _Echo | None, plain: _Echo | None) -> Front:
    front = Front(
        FrontSettings(
            host="127.0.0.1",
            port=0,
            plain_port=plain.port if plain else None,
            tls_port=tls.port if tls else None,
            max_connections=10,
            handshake_timeout_s=5,
        )
    )
    await front.bind()
    await front.serve()
    return front


def test_first_byte_picks_the_listener_and_peers_map_back() -> None:
    async def run() -> None:
        tls, plain = _Echo(b"T:"), _Echo(b"P:")
        await tls.start()
        await plain.start()
        front = await _front(tls, plain)
        for first, echo, tag in ((b"\x16\x03\x01", tls, b"T:"), (b"PRI *", plain, b"P:")):
            reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
            writer.write(first)
            assert await reader.readexactly(len(tag + first)) == tag + first
            client_port = writer.get_extra_info("sockname")[1]
            grpc_view = f"ipv4:127.0.0.1:{echo.peers[-1][1]}"
            assert front.client_peer(grpc_view) == f"ipv4:127.0.0.1:{client_port}"
            writer.close()
        assert front.client_peer("ipv4:10.0.0.1:5") == "ipv4:10.0.0.1:5"
        front.close()

    asyncio.run(run())


def test_enforcing_answers_plaintext_calls_with_a_grpc_status() -> None:
    async def run() -> None:
        tls = _Echo(b"T:")
        await tls.start()
        front = await _front(tls, None)
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
        headers = bytes([0, 0, 1, 1, 4, 0, 0, 0, 1]) + b"\x83"  # HEADERS on stream 1
        writer.write(preface + headers)
        answer = b""
        while b"requires TLS" not in answer:
            answer += await asyncio.wait_for(reader.read(4096), 5)
        assert b"grpc-status\x0214" in answer
        assert not tls.peers  # never reached a listener
        writer.close()
        front.close()

    asyncio.run(run())


def test_without_a_certificate_a_tls_client_is_closed() -> None:
    async def run() -> None:
        plain = _Echo(b"P:")
        await plain.start()
        front = await _front(None, plain)
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        writer.write(b"\x16\x03\x01")
        assert await asyncio.wait_for(reader.read(100), 5) == b""
        assert not plain.peers
        writer.close()
        front.close()

    asyncio.run(run())
