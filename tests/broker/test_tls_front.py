"""The front alone (``broker/security/front.py``), with an asyncio echo server standing for grpc's
plaintext listener: the first byte picks TLS (ended by the front) or plaintext, bytes pass
both ways, the client's own address is what ``client_peer`` gives for grpc's view of the
connection, and a plaintext HTTP/2 client under ``enforcing`` gets a trailers-only
``grpc-status: 14``.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

from rmq_spark.broker.security.front import Front, FrontSettings, tls_context
from rmq_spark.broker.security.tls import make_self_signed

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


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


async def _front(plain: _Echo, tls: ssl.SSLContext | None, plaintext: bool = True) -> Front:
    front = Front(
        FrontSettings(
            host="127.0.0.1",
            port=0,
            plain_port=plain.port,
            tls=tls,
            plaintext=plaintext,
            max_connections=10,
            handshake_timeout_s=5,
        )
    )
    await front.bind()
    await front.serve()
    return front


def _client_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    return context


def test_first_byte_picks_tls_or_plaintext_and_peers_map_back(tmp_path: Path) -> None:
    async def run() -> None:
        plain = _Echo(b"P:")
        await plain.start()
        front = await _front(plain, tls_context(make_self_signed(tmp_path, ["127.0.0.1"])))
        for tls in (_client_tls(), None):
            reader, writer = await asyncio.open_connection("127.0.0.1", front.port, ssl=tls)
            if tls is not None:
                assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
            writer.write(_PREFACE)
            assert await reader.readexactly(2 + len(_PREFACE)) == b"P:" + _PREFACE
            client_port = writer.get_extra_info("sockname")[1]
            grpc_view = f"ipv4:127.0.0.1:{plain.peers[-1][1]}"
            assert front.client_peer(grpc_view) == f"ipv4:127.0.0.1:{client_port}"
            writer.close()
        assert front.client_peer("ipv4:10.0.0.1:5") == "ipv4:10.0.0.1:5"
        front.close()

    asyncio.run(run())


def test_relayed_over_an_abstract_unix_socket_peers_map_back() -> None:
    """On Linux grpc listens on an abstract Unix address: each relayed connection has an
    abstract name of its own, which grpc reports as its peer and ``client_peer`` maps."""

    async def run() -> None:
        path = f"\0rmq-spark-test-front-{id(run)}"
        peers: list[bytes] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peers.append(writer.get_extra_info("peername"))
            while data := await reader.read(65536):
                writer.write(b"U:" + data)
            writer.close()

        server = await asyncio.start_unix_server(serve, path)
        front = Front(
            FrontSettings(
                host="127.0.0.1",
                port=0,
                plain_port=0,
                plain_path=path.encode(),
                tls=None,
                plaintext=True,
                max_connections=10,
                handshake_timeout_s=5,
            )
        )
        await front.bind()
        await front.serve()
        ports = set()
        for _ in range(2):
            reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
            writer.write(_PREFACE)
            assert await reader.readexactly(2 + len(_PREFACE)) == b"U:" + _PREFACE
            port = writer.get_extra_info("sockname")[1]
            grpc_view = "unix-abstract:" + peers[-1][1:].decode()
            assert front.client_peer(grpc_view) == f"ipv4:127.0.0.1:{port}"
            ports.add(port)
        assert len(set(peers)) == 2 and len(ports) == 2
        front.close()
        server.close()

    asyncio.run(run())


def test_enforcing_answers_plaintext_calls_with_a_grpc_status(tmp_path: Path) -> None:
    async def run() -> None:
        plain = _Echo(b"P:")
        await plain.start()
        tls = tls_context(make_self_signed(tmp_path, ["127.0.0.1"]))
        front = await _front(plain, tls, plaintext=False)
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        headers = bytes([0, 0, 1, 1, 4, 0, 0, 0, 1]) + b"\x83"  # HEADERS on stream 1
        writer.write(_PREFACE + headers)
        answer = b""
        while b"requires TLS" not in answer:
            answer += await asyncio.wait_for(reader.read(4096), 5)
        assert b"grpc-status\x0214" in answer
        assert not plain.peers  # never reached grpc
        writer.close()
        front.close()

    asyncio.run(run())


def test_without_a_certificate_a_tls_client_is_closed() -> None:
    async def run() -> None:
        plain = _Echo(b"P:")
        await plain.start()
        front = await _front(plain, None)
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        writer.write(b"\x16\x03\x01")
        assert await asyncio.wait_for(reader.read(100), 5) == b""
        assert not plain.peers
        writer.close()
        front.close()

    asyncio.run(run())
