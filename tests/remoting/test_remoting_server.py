"""The broker's remoting server against a real broker process: framing, unknown codes, oneway,
both header serializations, and malformed input (REMOTING_PROTOCOL.md 1.1-1.6, 12)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker.broker_harness import BrokerProcess, closed_by_peer, wait_for
from remoting_harness import FrameClient, raw_frame, start_remoting_broker

from rmq_spark.broker.remoting.codec import (
    FLAG_ONEWAY,
    RemotingCommand,
    SerializeType,
    encode_frame,
)
from rmq_spark.broker.remoting.codes import ResponseCode

pytestmark = pytest.mark.slow

UNKNOWN = 12345


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    root = tmp_path_factory.mktemp("remoting")
    # every log line shown (the repeat limiter would fold the second "closed" line)
    broker, port = start_remoting_broker(
        root / "store", root / "work", "broker.log_repeat_interval_ms=1"
    )
    yield broker, port
    assert broker.stop() == 0


def _still_serves(port: int) -> None:
    client = FrameClient(port)
    try:
        answer = client.call(RemotingCommand(code=UNKNOWN, opaque=99))
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and answer.opaque == 99
    finally:
        client.close()


def test_unknown_code_is_answered_not_supported_and_the_connection_stays(served) -> None:
    _, port = served
    client = FrameClient(port)
    try:
        for opaque in (7, 8):
            answer = client.call(RemotingCommand(code=UNKNOWN, opaque=opaque))
            assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert answer.opaque == opaque and answer.is_response
            assert answer.remark == f" request type {UNKNOWN} not supported"
    finally:
        client.close()


def test_a_oneway_request_is_not_answered(served) -> None:
    _, port = served
    client = FrameClient(port)
    try:
        client.send(RemotingCommand(code=UNKNOWN, opaque=1, flag=FLAG_ONEWAY))
        answer = client.call(RemotingCommand(code=UNKNOWN, opaque=2))
        assert answer.opaque == 2  # the oneway one got nothing
    finally:
        client.close()


def test_a_rocketmq_binary_header_is_answered_in_the_same_form(served) -> None:
    _, port = served
    client = FrameClient(port)
    try:
        client.send(
            RemotingCommand(code=UNKNOWN, opaque=5, ext_fields={"a": "b"}), SerializeType.ROCKETMQ
        )
        answer = client.read()
        assert answer.serialize_type is SerializeType.ROCKETMQ
        assert (answer.code, answer.opaque) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, 5)
    finally:
        client.close()


def test_huge_ext_fields_are_read_and_answered(served) -> None:
    _, port = served
    client = FrameClient(port)
    try:
        fields = {f"k{i}": "v" * 1000 for i in range(4000)}  # 4 MB of header
        answer = client.call(RemotingCommand(code=UNKNOWN, opaque=3, ext_fields=fields))
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and answer.opaque == 3
    finally:
        client.close()


@pytest.mark.parametrize(
    ("name", "data", "why"),
    [
        ("header past the frame", raw_frame(b"{}", header_length=1000), "header length 1000"),
        ("garbage JSON", raw_frame(b"{not json at all"), "JSON header does not parse"),
        ("JSON not an object", raw_frame(b"[1,2]"), "not an object"),
        ("unknown serialize type", raw_frame(b"{}", kind=7), "unknown serialize type 7"),
        ("oversize frame", (64 << 20).to_bytes(4, "big") + b"\0" * 60, "over the limit"),
        ("length below 4", (2).to_bytes(4, "big") + b"\0" * 8, "below the 4"),
        ("code not an int", raw_frame(json.dumps({"code": "x"}).encode()), "not an int32"),
    ],
)
def test_a_malformed_frame_closes_the_connection_with_one_log_line(
    served, name: str, data: bytes, why: str
) -> None:
    broker, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        wait_for(lambda: closed_by_peer(sock), 10, f"the broker to close after {name}")
    line = wait_for(
        lambda: [x for x in broker.log_text().splitlines() if why in x], 10, "the log line"
    )
    assert "remoting: closed the connection from 127.0.0.1" in line[-1]
    assert "Traceback" not in broker.log_text()
    assert broker.proc.poll() is None
    _still_serves(port)


def test_a_truncated_frame_then_close_leaves_the_broker_serving(served) -> None:
    broker, port = served
    frame = raw_frame(json.dumps({"code": UNKNOWN, "opaque": 1}).encode(), b"body")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(frame[: len(frame) // 2])
    _still_serves(port)
    assert broker.proc.poll() is None and "Traceback" not in broker.log_text()


def test_many_requests_in_flight_on_one_connection_are_all_answered(served) -> None:
    _, port = served
    client = FrameClient(port)
    try:
        data = b"".join(encode_frame(RemotingCommand(code=UNKNOWN, opaque=i)) for i in range(2000))
        client.send_raw(data)
        assert sorted(client.read().opaque for _ in range(2000)) == list(range(2000))
    finally:
        client.close()


def test_remoting_listen_empty_serves_no_remoting(tmp_path: Path) -> None:
    from namesrv_harness import accepts, free_port

    port = free_port()
    broker, _ = start_remoting_broker(
        tmp_path / "store", tmp_path / "work", "broker.remoting_listen="
    )
    try:
        assert "remoting port" not in broker.log_text()
        assert not accepts(port)
    finally:
        assert broker.stop() == 0


def _silent(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def test_connection_caps_and_timeouts_are_the_grpc_ports(tmp_path: Path) -> None:
    broker, port = start_remoting_broker(
        tmp_path / "store", tmp_path / "work", "broker.max_connections_per_address=2",
        "broker.handshake_timeout_ms=1500", "broker.connection_idle_timeout_ms=3000",
    )  # fmt: skip
    try:
        # at the per-address cap the oldest connection without a whole frame gives way
        first, second = _silent(port), _silent(port)
        wait_for(lambda: "ready" if second.fileno() > 0 else None, 5, "connect")
        proven = FrameClient(port)
        wait_for(lambda: closed_by_peer(first), 10, "the oldest silent one to be closed")
        assert proven.call(RemotingCommand(code=UNKNOWN, opaque=1)).opaque == 1
        # a silent connection is closed after handshake_timeout_ms
        wait_for(lambda: closed_by_peer(second), 10, "the silent one to time out")
        # an answered connection left idle is closed after connection_idle_timeout_ms
        wait_for(lambda: closed_by_peer(proven.sock), 15, "the idle one to be closed")
        assert broker.proc.poll() is None
        _still_serves(port)
    finally:
        assert broker.stop() == 0


def test_the_embedded_broker_serves_remoting_next_to_grpc(tmp_path: Path) -> None:
    from rmq_spark.broker.embedded import Broker

    with Broker(tmp_path / "store", listen="127.0.0.1:0") as broker:
        assert broker.remoting is not None and broker.remoting.port > 0
        client = FrameClient(broker.remoting.port)
        try:
            answer = client.call(RemotingCommand(code=UNKNOWN, opaque=4))
            assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        finally:
            client.close()


def test_permissive_port_serves_tls_and_plaintext_with_the_brokers_certificate(served) -> None:
    import ssl

    broker, port = served
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.load_verify_locations(broker.store_dir / "config" / "tls" / "cert.pem")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw) as tls:
            tls.sendall(encode_frame(RemotingCommand(code=UNKNOWN, opaque=21)))
            data = b""
            while len(data) < 8 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                data += tls.recv(65536)
    assert b'"opaque":21' in data
    _still_serves(port)  # plaintext on the same port
