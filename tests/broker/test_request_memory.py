"""Request memory is bounded before grpc buffers it: the front books each declared size.

Before: 8 concurrent 120 MiB batches took the broker to 1,188 MB: grpc read every request
whole before the in-flight budget could refuse it. Now the front reads each gRPC message's
declared length (its 5-byte prefix) and books it in ``inflight_request_bytes_max`` (one
client address at most half of it, or one maximal message) before passing the message on;
a message that does not fit waits, a few frames held, or is answered RESOURCE_EXHAUSTED.

The attack: raw HTTP/2 connections from 127.0.0.2, 8 streams each, every stream a
SendMessage declaring a maximal (31 MiB) request and sending the first 3.9 MiB of it (what
grpc's 4 MiB stream window allows without waiting), then nothing. Before: grpc held every
stream's bytes (64 requests: +233 MB). Scaled down for a shared test machine: a 32 MiB
receive limit and a 64 MiB budget.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from broker_harness import BrokerProcess, wait_for

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc

_MIB = 1024 * 1024
_METADATA = (("x-mq-client-id", "request-memory"), ("x-mq-language", "PYTHON"))
# Stated bound: the broker's peak RSS (VmHWM) grows by less than this during the attack
# (measured 6-10 MB; before: 8 requests +31 MB, 64 requests +233 MB).
_PEAK_GROWTH_MB = 48
_STREAMS = 8
_DECLARED = 31 * _MIB
_SENT = 3_900 * 1024
_PATH = b"/apache.rocketmq.v2.MessagingService/SendMessage"


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
    )


def _literal(name: bytes, value: bytes) -> bytes:
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def _headers(path: bytes) -> bytes:
    return (
        b"\x83\x86\x04"  # :method POST, :scheme http, :path (literal, indexed name)
        + bytes([len(path)])
        + path
        + _literal(b":authority", b"broker")
        + _literal(b"content-type", b"application/grpc")
        + _literal(b"te", b"trailers")
    )


class _Peer:
    """The client end of a raw HTTP/2 connection that honours flow control, as a client's
    library does: it sends what the broker's windows allow, and answers SETTINGS and PING."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""
        self._initial = 65_535
        self.conn_window = 65_535
        self.windows: dict[int, int] = {}
        self.ended: set[int] = set()

    def open(self, stream: int, path: bytes, end_stream: bool = False) -> None:
        self.windows[stream] = self._initial
        self.sock.sendall(_frame(1, 4 | int(end_stream), stream, _headers(path)))

    def pump(self, timeout_s: float) -> bool:
        """Read the broker's frames for up to ``timeout_s``; False: nothing came."""
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(65_536)
        except TimeoutError:
            return False
        finally:
            self.sock.settimeout(5)
        if not data:
            raise ConnectionError("the broker closed the connection")
        self._buffer += data
        while len(self._buffer) >= 9 and len(self._buffer) >= 9 + _length(self._buffer):
            length, kind, flags = _length(self._buffer), self._buffer[3], self._buffer[4]
            stream = int.from_bytes(self._buffer[5:9], "big") & 0x7FFFFFFF
            payload, self._buffer = self._buffer[9 : 9 + length], self._buffer[9 + length :]
            self._on_frame(kind, flags, stream, payload)
        return True

    def _on_frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == 4 and not flags & 1:  # SETTINGS: INITIAL_WINDOW_SIZE moves every window
            for at in range(0, len(payload), 6):
                if int.from_bytes(payload[at : at + 2], "big") == 4:
                    value = int.from_bytes(payload[at + 2 : at + 6], "big")
                    for key in self.windows:
                        self.windows[key] += value - self._initial
                    self._initial = value
            self.sock.sendall(_frame(4, 1, 0, b""))
        elif kind == 8:  # WINDOW_UPDATE
            increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
            if stream == 0:
                self.conn_window += increment
            elif stream in self.windows:
                self.windows[stream] += increment
        elif kind == 6 and not flags & 1:  # PING
            self.sock.sendall(_frame(6, 1, 0, payload))
        elif kind == 3 or (kind == 1 and flags & 1):  # RST_STREAM, or trailers
            self.ended.add(stream)

    def send(self, bodies: dict[int, bytes]) -> None:
        """Send each stream's bytes as far as the windows allow; returns when all are sent,
        or when the broker has given no window for half a second (it holds the rest)."""
        sent = dict.fromkeys(bodies, 0)
        while True:
            for stream, body in bodies.items():
                while sent[stream] < len(body) and stream not in self.ended:
                    n = min(16_384, len(body) - sent[stream], self.windows[stream])
                    n = min(n, self.conn_window)
                    if n <= 0:
                        break
                    chunk = body[sent[stream] : sent[stream] + n]
                    self.sock.sendall(_frame(0, 0, stream, chunk))
                    sent[stream] += n
                    self.windows[stream] -= n
                    self.conn_window -= n
            if all(sent[s] >= len(body) or s in self.ended for s, body in bodies.items()):
                return
            if not self.pump(0.5):
                return


def _length(buffer: bytes) -> int:
    return int.from_bytes(buffer[:3], "big")


def _attack_connection(
    address: str, streams: int = _STREAMS, answered: bool = False, tls: bool = False
) -> socket.socket:
    """A raw connection from 127.0.0.2: ``streams`` SendMessage calls each declaring a maximal
    request and sending ``_SENT`` bytes of it, as far as flow control lets it; ``answered``:
    after one answered call first; ``tls``: over TLS (the broker's self-signed certificate)."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5, source_address=("127.0.0.2", 0))
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["h2"])
        sock = context.wrap_socket(sock, server_hostname="localhost")
    peer = _Peer(sock)
    sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(4, 0, 0, b""))
    first = 1
    if answered:
        peer.open(1, b"/apache.rocketmq.v2.MessagingService/QueryRoute")
        sock.sendall(_frame(0, 1, 1, b"\x00" * 5))
        while 1 not in peer.ended:
            assert peer.pump(5), "QueryRoute was not answered"
        first = 3
    body = b"\x00" + _DECLARED.to_bytes(4, "big") + b"x" * (_SENT - 5)
    ids = [first + 2 * k for k in range(streams)]
    for stream in ids:
        peer.open(stream, _PATH)
    peer.send(dict.fromkeys(ids, body))
    return sock


@contextmanager
def _attack(address: str, requests: int, tls: bool) -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    try:
        for _ in range(requests // _STREAMS):
            socks.append(_attack_connection(address, tls=tls))
        yield socks
    finally:
        for sock in socks:
            sock.close()


def _vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM line")


def _tree_peak_mb(pid: int) -> float:
    """The peak RSS of the broker and of its children (the native front holds the requests
    it reads in a process of its own)."""
    children = [
        child
        for task in Path(f"/proc/{pid}/task").iterdir()  # a child is its parent thread's
        for child in (task / "children").read_text().split()
    ]
    return _vm_hwm_mb(pid) + sum(_vm_hwm_mb(int(child)) for child in children)


def _send(stub: Any, body: bytes, count: int = 1) -> int:
    messages = []
    for i in range(count):
        message = pb.Message(body=body)
        message.topic.name = "ok"
        message.system_properties.message_id = f"send-{time.monotonic_ns()}-{i}"
        message.system_properties.message_type = pb.NORMAL
        messages.append(message)
    request = spb.SendMessageRequest(messages=messages)
    return int(stub.SendMessage(request, timeout=30, metadata=_METADATA).status.code)


@pytest.mark.parametrize("front", ["python", "native"])
@pytest.mark.parametrize(("requests", "tls"), [(8, False), (64, False), (64, True)])
def test_concurrent_maximal_requests_keep_peak_memory_bounded(
    broker_factory: Callable[..., BrokerProcess], requests: int, tls: bool, front: str
) -> None:
    broker = broker_factory(
        "broker.grpc_receive_limit_bytes=33554432",
        "broker.inflight_request_bytes_max=67108864",
        "broker.topics=ok:1",
        f"broker.grpc_front={front}",
    )
    with grpc.insecure_channel(broker.address) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        assert _send(stub, b"warm") == pb.OK
        before = _tree_peak_mb(broker.proc.pid)
        with _attack(broker.address, requests, tls):
            time.sleep(1.0)  # the broker has read what was sent
            growth = _tree_peak_mb(broker.proc.pid) - before
            started = time.monotonic()
            assert _send(stub, b"legitimate") == pb.OK  # served during the attack
            legit_s = time.monotonic() - started
            # A maximal legitimate request (7 x 4 MiB) still fits the other half.
            assert _send(stub, b"m" * (4 * _MIB - 1024), count=7) == pb.OK
    assert growth < _PEAK_GROWTH_MB, f"peak RSS grew {growth:.0f} MB"
    print(f"{requests} requests: peak RSS +{growth:.0f} MB, a legitimate send {legit_s:.3f} s")
    assert "Traceback" not in broker.log_text()


@pytest.mark.parametrize("front", ["python", "native"])
def test_a_stalled_booking_is_closed_when_others_wait(
    broker_factory: Callable[..., BrokerProcess], front: str
) -> None:
    # The budget is one maximal message; an answered connection books it and stops sending.
    broker = broker_factory(
        "broker.grpc_receive_limit_bytes=33554432",
        "broker.inflight_request_bytes_max=33554432",
        "broker.handshake_timeout_ms=2000",
        "broker.topics=ok:1",
        f"broker.grpc_front={front}",
    )
    stalled = _attack_connection(broker.address, streams=1, answered=True)
    try:
        with grpc.insecure_channel(broker.address) as channel:
            stub = spb_grpc.MessagingServiceStub(channel)

            # Refused (RESOURCE_EXHAUSTED) until the stalled connection is closed (~2 s).
            def sent() -> bool:
                try:
                    return _send(stub, b"m" * (4 * _MIB - 1024), count=7) == pb.OK
                except grpc.RpcError as err:
                    assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, err
                    time.sleep(0.5)
                    return False

            wait_for(sent, 20, "a maximal send to pass")
    finally:
        stalled.close()
    assert "whose booked request stalled" in broker.log_text()


@pytest.mark.parametrize("front", ["python", "native"])
def test_each_answered_request_gives_its_booking_back(
    broker_factory: Callable[..., BrokerProcess], front: str
) -> None:
    # A budget of one maximal message: each send fits only if the one before gave it back.
    broker = broker_factory(
        "broker.grpc_receive_limit_bytes=33554432",
        "broker.inflight_request_bytes_max=33554432",
        "broker.topics=ok:1",
        f"broker.grpc_front={front}",
    )
    with grpc.insecure_channel(broker.address) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        for _ in range(3):
            assert _send(stub, b"m" * (4 * _MIB - 1024), count=7) == pb.OK
    assert "Traceback" not in broker.log_text()


def test_a_streams_later_message_over_the_budget_ends_its_call_on_the_native_front(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    # The budget is one maximal message, booked by a connection that stops sending; a
    # Telemetry stream's first command is served, its second (2 MiB) does not fit.
    broker = broker_factory(
        "broker.grpc_receive_limit_bytes=33554432",
        "broker.inflight_request_bytes_max=33554432",
        "broker.topics=ok:1",
        "broker.grpc_front=native",
    )
    answered = threading.Event()

    def commands() -> Iterator[Any]:
        first = spb.TelemetryCommand()
        first.settings.client_type = pb.PRODUCER
        first.settings.publishing.topics.add(name="ok")
        yield first
        answered.wait(10)
        second = spb.TelemetryCommand()
        second.settings.client_type = pb.PRODUCER
        second.settings.user_agent.version = "v" * (2 * _MIB)
        yield second

    stalled = _attack_connection(broker.address, streams=1, answered=True)
    try:
        with grpc.insecure_channel(broker.address) as channel:
            stub = spb_grpc.MessagingServiceStub(channel)
            replies = stub.Telemetry(commands(), metadata=_METADATA, timeout=10)
            assert next(replies).status.code == pb.OK
            answered.set()
            with pytest.raises(grpc.RpcError) as refused:
                next(replies)
    finally:
        stalled.close()
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
    assert "inflight_request_bytes_max" in str(refused.value.details())
    assert "Traceback" not in broker.log_text()
