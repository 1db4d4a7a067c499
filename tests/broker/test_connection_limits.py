"""Connection lock-out levers: every attack leaves room for a legitimate official client.

Before: ``max_connections`` sockets that each sent the HTTP/2 preface and an empty SETTINGS
frame and then nothing locked every new client out (the front only made room by closing
connections that had sent nothing; grpc kept them until keepalive, ~80 s); a TLS slowloris
(one ClientHello byte at a time) held its slots for grpc's handshake timeout; one address
could take every slot with connections that had each made one call. Now a connection that
has neither sent a whole request nor been answered within ``handshake_timeout_ms`` of its
accept is closed, at the cap the oldest such one makes room, and one address holds at most
``max_connections_per_address``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest
from broker_harness import BrokerProcess, closed_by_peer, wait_for

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # an empty SETTINGS frame
_ATTACK_S = 12.0  # how long each attack runs (bounded; loopback only)
_METADATA = (("x-mq-client-id", "connection-limits"), ("x-mq-language", "PYTHON"))


def _hpack_literal(name: bytes, value: bytes) -> bytes:
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def _query_route_call() -> bytes:
    """One unary QueryRoute call on stream 1 (HPACK literals only), its message empty."""
    path = b"/apache.rocketmq.v2.MessagingService/QueryRoute"
    block = (
        b"\x83\x86\x04"  # :method POST, :scheme http, :path (literal, indexed name)
        + bytes([len(path)])
        + path
        + _hpack_literal(b":authority", b"broker")
        + _hpack_literal(b"content-type", b"application/grpc")
        + _hpack_literal(b"te", b"trailers")
    )
    headers = len(block).to_bytes(3, "big") + b"\x01\x04" + (1).to_bytes(4, "big") + block
    data = (5).to_bytes(3, "big") + b"\x00\x01" + (1).to_bytes(4, "big") + b"\x00" * 5
    return _PREFACE + _SETTINGS + headers + data


class _Attacker:
    """Keeps ``count`` attacking sockets open from ``source`` for ``_ATTACK_S``, reopening
    the ones the broker closes; ``first`` is sent on connect, then ``drip`` every second."""

    def __init__(
        self, address: str, count: int, first: bytes, drip: bytes = b"", source: str = ""
    ) -> None:
        self.host, port = address.rsplit(":", 1)
        self.port = int(port)
        self.count, self.first, self.drip, self.source = count, first, drip, source
        self.opened = self.closed_by_broker = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> socket.socket | None:
        try:
            sock = socket.create_connection(
                (self.host, self.port),
                timeout=2,
                source_address=(self.source, 0) if self.source else None,
            )
            sock.sendall(self.first)
        except OSError:
            return None
        self.opened += 1
        return sock

    def _run(self) -> None:
        socks: list[socket.socket] = []
        end = time.monotonic() + _ATTACK_S
        while not self._stop.is_set() and time.monotonic() < end:
            for sock in list(socks):
                if closed_by_peer(sock, 0.001):
                    socks.remove(sock)
                    sock.close()
                    self.closed_by_broker += 1
                elif self.drip:
                    try:
                        sock.sendall(self.drip)
                    except OSError:
                        pass
            while len(socks) < self.count and not self._stop.is_set():
                sock = self._open()
                if sock is None:
                    break
                socks.append(sock)
            self._stop.wait(1.0)
        for sock in socks:
            sock.close()

    def __enter__(self) -> _Attacker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def _official_sends(official_producer: Callable[..., Any], rocketmq: Any, address: str) -> None:
    """The official Python client starts and sends three messages, each within its timeout."""
    producer = official_producer(address, ("conn-limits",), request_timeout=5)
    for i in range(3):
        message = rocketmq.Message()
        message.topic = "conn-limits"
        message.body = f"during the attack {i}".encode()
        assert producer.send(message).message_id
    producer.shutdown()


@contextmanager
def _tls_stub(broker: BrokerProcess) -> Iterator[Any]:
    cert = (broker.store_dir / "config" / "tls" / "cert.pem").read_bytes()
    credentials = grpc.ssl_channel_credentials(root_certificates=cert)
    with grpc.secure_channel(broker.address, credentials) as channel:
        yield spb_grpc.MessagingServiceStub(channel)


def _tls_send(broker: BrokerProcess) -> int:
    message = pb.Message(body=b"over tls")
    message.topic.name = "conn-limits"
    message.system_properties.message_id = f"tls-{time.monotonic_ns()}"
    message.system_properties.message_type = pb.NORMAL
    with _tls_stub(broker) as stub:
        request = spb.SendMessageRequest(messages=[message])
        return int(stub.SendMessage(request, timeout=5, metadata=_METADATA).status.code)


@pytest.fixture
def capped(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return broker_factory(
        "broker.max_connections=20",
        "broker.handshake_timeout_ms=3000",
        "broker.topics=conn-limits:1",
    )


def test_http2_preface_holders_cannot_lock_clients_out(
    capped: BrokerProcess, official_producer: Callable[..., Any], rocketmq: Any
) -> None:
    with _Attacker(capped.address, 30, _PREFACE + _SETTINGS) as attack:
        wait_for(lambda: attack.opened >= 20, 10, "the attack to fill the cap")
        _official_sends(official_producer, rocketmq, capped.address)
        assert _tls_send(capped) == pb.OK
        # Held sockets go after handshake_timeout_ms, not keepalive (~80 s) or idle (300 s).
        wait_for(lambda: attack.closed_by_broker >= 20, 10, "held sockets closed")
    assert "Traceback" not in capped.log_text()


def test_tls_slowloris_cannot_lock_clients_out(
    capped: BrokerProcess, official_producer: Callable[..., Any], rocketmq: Any
) -> None:
    hello = bytes([0x16, 0x03, 0x01])  # a ClientHello record's start, then one byte a second
    with _Attacker(capped.address, 30, hello, drip=b"\x00") as attack:
        wait_for(lambda: attack.opened >= 20, 10, "the attack to fill the cap")
        _official_sends(official_producer, rocketmq, capped.address)
        assert _tls_send(capped) == pb.OK
        wait_for(lambda: attack.closed_by_broker >= 20, 10, "slow handshakes closed")


def test_one_address_cannot_take_every_slot(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: Any,
) -> None:
    # Each attacking connection makes one real call (so it is answered, not evictable) and
    # stays; from 127.0.0.2 it may hold 10 of the 20 slots, the rest stay for others.
    broker = broker_factory(
        "broker.max_connections=20",
        "broker.max_connections_per_address=10",
        "broker.topics=conn-limits:1",
    )
    with _Attacker(broker.address, 40, _query_route_call(), source="127.0.0.2") as attack:
        wait_for(lambda: attack.opened >= 20, 10, "the attack to pass the address's cap")
        _official_sends(official_producer, rocketmq, broker.address)
        assert _tls_send(broker) == pb.OK
    assert "max_connections_per_address" in broker.log_text()


def test_a_long_polling_first_call_outlives_the_handshake_timeout(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    # The request is whole at once; its answer comes after the long poll (3 s > 1 s).
    broker = broker_factory("broker.handshake_timeout_ms=1000", "broker.topics=conn-limits:1")
    request = spb.ReceiveMessageRequest(batch_size=1)
    request.message_queue.topic.name = "conn-limits"
    request.group.name = "pollers"
    request.long_polling_timeout.FromSeconds(3)
    request.invisible_duration.FromSeconds(30)
    with grpc.insecure_channel(broker.address) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        started = time.monotonic()
        replies = list(stub.ReceiveMessage(request, timeout=30, metadata=_METADATA))
    assert replies[0].status.code == pb.MESSAGE_NOT_FOUND
    assert time.monotonic() - started >= 2.5  # it really waited
