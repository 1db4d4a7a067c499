"""Bounded resources: connection cap, handshake and idle timeouts, request bytes in flight.

Before: 1,051 idle sockets locked every new client out (file descriptors ran out), 300 idle
sockets stayed open forever, one accepted 120 MiB batch took the broker to 498 MB. Now idle
sockets are closed after ``handshake_timeout_ms`` / ``connection_idle_timeout_ms``, at the
connection cap a silent connection makes room for a new one, and SendMessage bytes past
``inflight_request_bytes_max`` are answered TOO_MANY_REQUESTS; the broker keeps serving.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from broker_harness import BrokerProcess, closed_by_peer, wait_for

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.broker.security.limits import Admitted, InflightBytes

_MIB = 1024 * 1024
_METADATA = (("x-mq-client-id", "limits-test"), ("x-mq-language", "PYTHON"))
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


@contextmanager
def _sockets(address: str, count: int, first: bytes = b"") -> Iterator[list[socket.socket]]:
    host, port = address.rsplit(":", 1)
    opened = []
    try:
        for _ in range(count):
            sock = socket.create_connection((host, int(port)), timeout=5)
            if first:
                sock.sendall(first)
            opened.append(sock)
        yield opened
    finally:
        for sock in opened:
            sock.close()


def _send(stub: Any, message_id: str, body: bytes = b"x", count: int = 1) -> Any:
    messages = []
    for i in range(count):
        message = pb.Message(body=body)
        message.topic.name = "limits"
        message.system_properties.message_id = f"{message_id}-{i}"
        message.system_properties.message_type = pb.NORMAL
        messages.append(message)
    request = spb.SendMessageRequest(messages=messages)
    return stub.SendMessage(request, timeout=30, metadata=_METADATA)


def _send_future(stub: Any, message_id: str) -> Any:
    messages = []
    for i in range(4):  # a 4 MiB batch
        message = pb.Message(body=b"m" * _MIB)
        message.topic.name = "limits"
        message.system_properties.message_id = f"{message_id}-{i}"
        message.system_properties.message_type = pb.NORMAL
        messages.append(message)
    request = spb.SendMessageRequest(messages=messages)
    return stub.SendMessage.future(request, timeout=60, metadata=_METADATA)


def _official_send(official_producer: Callable[..., Any], rocketmq: Any, address: str) -> str:
    producer = official_producer(address, ("limits",))
    message = rocketmq.Message()
    message.topic = "limits"
    message.body = b"after the flood"
    return str(producer.send(message).message_id)


@pytest.mark.parametrize("tls_mode", ["permissive", "disabled"])
def test_flood_of_idle_sockets_new_client_still_produces_and_idle_ones_close(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: Any,
    tls_mode: str,
) -> None:
    # permissive: the front closes a silent socket to admit the client at once; disabled
    # (grpc's own cap): clients are refused until the handshake timeout closes silent ones.
    broker = broker_factory(
        f"broker.tls_mode={tls_mode}",
        "broker.max_connections=20",
        "broker.handshake_timeout_ms=1500",
        "broker.connection_idle_timeout_ms=2000",
    )
    with _sockets(broker.address, 60) as silent:
        if tls_mode == "disabled":  # grpc refuses at its cap until the handshake timeout
            wait_for(lambda: closed_by_peer(silent[0]), 10, "the first silent socket closed")
        assert _official_send(official_producer, rocketmq, broker.address)
        # The broker closes every silent socket (made room for the client, or timed out).
        wait_for(lambda: all(closed_by_peer(s) for s in silent), 10, "silent sockets closed")
    with _sockets(broker.address, 5, _H2_PREFACE) as no_calls:
        wait_for(lambda: all(closed_by_peer(s) for s in no_calls), 10, "idle h2 closed")
    assert tls_mode == "disabled" or "max_connections" in broker.log_text()
    assert "Traceback" not in broker.log_text()


def test_at_the_cap_of_talking_connections_new_ones_wait_for_the_handshake_timeout(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory("broker.max_connections=10", "broker.handshake_timeout_ms=1500")
    with _sockets(broker.address, 10, b"P") as stuck:  # each sent a byte, none finishes
        with _sockets(broker.address, 1) as (refused,):
            wait_for(lambda: closed_by_peer(refused), 5, "the 11th connection closed")
        wait_for(lambda: all(closed_by_peer(s) for s in stuck), 10, "stuck handshakes closed")
    with grpc.insecure_channel(broker.address) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        assert _send(stub, "after-cap").status.code == pb.OK


def _rss_anon_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon line")


# Stated bound: broker anonymous memory (heap, not the store's mapped files) stays under
# this while 16 clients send 8 x 4 MiB batches at once with an in-flight budget of 16 MiB
# (measured 180-310 MB on a busy 2-core machine; with the budget at 1 GiB, i.e. none, up to
# 471 MB). What is left above the budget is grpc's: it reads each request whole first.
_RSS_ANON_BOUND_MB = 400


def _code(call: Any) -> int:
    """The RocketMQ status, or -8 for the front's over-budget RESOURCE_EXHAUSTED."""
    try:
        return int(call.result().status.code)
    except grpc.RpcError as err:
        assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, err
        assert "inflight_request_bytes_max" in (err.details() or "")
        return -8


def test_concurrent_4_mib_batches_keep_memory_bounded(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(
        "broker.inflight_request_bytes_max=16777216",
        "broker.grpc_receive_limit_bytes=8388608",
    )
    pid = broker.proc.pid
    peak = [_rss_anon_kb(pid)]
    codes: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _rss_anon_kb(pid))
            time.sleep(0.02)

    def client(n: int) -> None:
        with grpc.insecure_channel(broker.address) as channel:
            stub = spb_grpc.MessagingServiceStub(channel)
            for i in range(2):  # 8 batches at once per client: 128 requests, 512 MiB at once
                calls = [_send_future(stub, f"big-{n}-{i}-{j}") for j in range(8)]
                codes.extend(_code(call) for call in calls)

    watcher = threading.Thread(target=watch)
    watcher.start()
    clients = [threading.Thread(target=client, args=(n,)) for n in range(16)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join(timeout=300)
    stop.set()
    watcher.join()
    assert set(codes) <= {pb.OK, pb.TOO_MANY_REQUESTS, -8}, codes
    assert pb.OK in codes
    assert peak[0] < _RSS_ANON_BOUND_MB * 1024, f"RssAnon peaked at {peak[0] // 1024} MB"
    with grpc.insecure_channel(broker.address) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        assert _send(stub, "after-batches").status.code == pb.OK
        with pytest.raises(grpc.RpcError) as refused:
            _send(stub, "too-big", b"m" * _MIB, count=9)  # past the 8 MiB receive limit
        assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _send(stub, "after-too-big").status.code == pb.OK


def test_inflight_budget_books_and_returns_bytes() -> None:
    budget = InflightBytes(100)
    admit = budget.admit(lambda data: data.decode(), lambda reason: ("refused", reason))
    first = admit(b"x" * 60)
    assert isinstance(first, Admitted)
    assert first.message == "x" * 60
    assert admit(b"y" * 50)[0] == "refused"
    first.release()
    first.release()  # once only
    assert budget.used_bytes == 0
    second = admit(b"z" * 100)
    assert budget.used_bytes == 100
    del second  # a call cancelled before its handler ran
    assert budget.used_bytes == 0
