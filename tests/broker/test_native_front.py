"""``broker.grpc_front = native``: the Go front relays the official clients' calls to the
broker's own handlers (``rmq_spark/broker/grpc/native_front.py``, ``native/front``).

What the Python front guarantees must hold here too: acknowledged sends survive a kill -9,
the auth gate refuses unsigned callers on every RPC, TLS and plaintext share the port (TLS
only when enforcing), the connection caps hold, a dead front comes back and a dead broker
leaves no front holding its port.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest
from broker_harness import (
    REPO_ROOT,
    BrokerProcess,
    by_uniq_key,
    closed_by_peer,
    read_records,
    wait_for,
)
from test_auth import USERS, _requests, call

from rmq_spark.broker.grpc.native_front import build, go_command
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc

PEERS = REPO_ROOT / "bench" / "peers"
if str(PEERS) not in sys.path:
    sys.path.insert(0, str(PEERS))

NATIVE = "broker.grpc_front=native"
SMALL = "store.segment_size_bytes=16777216"


@pytest.fixture(scope="module", autouse=True)
def front_binary() -> Path:
    return build()  # up to date after `make setup`: a look at the sources' times


def _front_pid(broker: BrokerProcess) -> int:
    [pid] = _children(broker.proc.pid)
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "rmq-front"
    return pid


def _children(pid: int) -> list[int]:
    found = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(child) for child in children.read_text().split()]
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.parametrize("front", ["native", "python"])
def test_the_official_client_sends_through_either_front(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
    front: str,
) -> None:
    broker = broker_factory(f"broker.grpc_front={front}", SMALL, "broker.default_queue_count=2")
    assert ("through the native front" in broker.log_text()) == (front == "native")
    producer = official_producer(broker.address, ("orders",))
    sent = {}
    for i in range(10):
        message = rocketmq.Message()
        message.topic, message.body, message.tag = "orders", b"order %d" % i, "TagA"
        sent[producer.send(message).message_id] = message.body
    producer.shutdown()
    assert broker.stop() == 0
    stored = by_uniq_key(read_records(broker.store_dir))
    assert {key: records[0].body for key, records in stored.items()} == sent
    assert all(records[0].born_host.ip == "127.0.0.1" for records in stored.values())


def test_the_fronts_own_go_tests_pass() -> None:
    # The request watch's frame reading, cut at every read boundary, and its bookings
    # (native/front/requests_test.go).
    command, env, source = go_command("test", "-count=1", "./...")
    done = subprocess.run(
        command, cwd=source, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ok" in done.stdout


def test_auto_runs_the_native_front_when_it_is_built_else_the_python_one(
    broker_factory: Callable[..., BrokerProcess],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    built = broker_factory("broker.grpc_front=auto", SMALL, store_dir=tmp_path / "built")
    assert "gRPC front native (broker.grpc_front=auto)" in built.log_text()
    assert "through the native front" in built.log_text()
    monkeypatch.setenv("RMQ_SPARK_NATIVE_FRONT", str(tmp_path / "no-such-front"))
    missing = broker_factory("broker.grpc_front=auto", SMALL, store_dir=tmp_path / "missing")
    assert "gRPC front python (broker.grpc_front=auto)" in missing.log_text()
    answer = call(missing.address, "QueryRoute", _requests()["QueryRoute"])
    assert answer.status.code == pb.OK
    assert "through the native front" not in missing.log_text()


def test_every_rpc_refuses_an_unsigned_caller_through_the_native_front(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    broker = broker_factory(
        NATIVE, SMALL, "broker.auth_enabled=true", f"broker.auth_users_file={users}"
    )
    for method, request in _requests().items():
        response = call(broker.address, method, request)
        assert response.status.code == pb.UNAUTHORIZED, (method, response)
    assert read_records(broker.store_dir) == []


def test_tls_and_plaintext_share_the_port_and_enforcing_refuses_plaintext(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    permissive = broker_factory(NATIVE, SMALL)
    host, port = permissive.address.rsplit(":", 1)
    assert _tls_alpn(host, int(port)) == "h2"
    assert call(permissive.address, "QueryRoute", _requests()["QueryRoute"]).status.code == pb.OK
    enforcing = broker_factory(NATIVE, SMALL, "broker.tls_mode=enforcing",
                               "broker.handshake_timeout_ms=1000",
                               store_dir=tmp_path / "enforcing")  # fmt: skip
    host, port = enforcing.address.rsplit(":", 1)
    assert _tls_alpn(host, int(port)) == "h2"
    # A plaintext call is answered that the port requires TLS (test_tls.py); a plaintext
    # connection never counts as one that opened a call, so the handshake timeout closes it.
    with socket.create_connection((host, int(port)), timeout=5) as plain:
        plain.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        assert wait_for(lambda: closed_by_peer(plain), 10, "plaintext to be refused")


def _tls_alpn(host: str, port: int) -> str | None:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((host, port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        return tls.selected_alpn_protocol()


def test_at_the_cap_the_oldest_idle_connection_gives_way_and_busy_ones_are_kept(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(NATIVE, SMALL, "broker.max_connections_per_address=2")
    host, port = broker.address.rsplit(":", 1)
    route = _requests()["QueryRoute"]
    idle = [socket.create_connection((host, int(port)), timeout=5) for _ in range(2)]
    with socket.create_connection((host, int(port)), timeout=5) as third:
        assert wait_for(lambda: closed_by_peer(idle[0]), 10, "the oldest idle one to give way")
        assert not closed_by_peer(idle[1]) and not closed_by_peer(third)
    busy = [_channel(broker.address) for _ in range(2)]  # each makes room, then is busy
    try:
        for channel in busy:
            stub = spb_grpc.MessagingServiceStub(channel)
            assert stub.QueryRoute(route, metadata=_CLIENT, timeout=10).status.code == pb.OK
        with socket.create_connection((host, int(port)), timeout=5) as refused:
            assert wait_for(lambda: closed_by_peer(refused), 10, "a fourth to be refused")
        for channel in busy:  # the busy ones were kept
            stub = spb_grpc.MessagingServiceStub(channel)
            assert stub.QueryRoute(route, metadata=_CLIENT, timeout=10).status.code == pb.OK
    finally:
        for channel in busy:
            channel.close()
        idle[1].close()


def test_a_connection_that_opens_no_call_is_closed_after_the_handshake_timeout(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(NATIVE, SMALL, "broker.handshake_timeout_ms=300")
    host, port = broker.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as silent:
        # HTTP/2's preface and an empty SETTINGS frame: the handshake is done, no call follows.
        silent.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
        assert wait_for(lambda: closed_by_peer(silent), 10, "a silent connection to be closed")


_CLIENT = (("x-mq-client-id", "test-client"),)


def _channel(address: str) -> grpc.Channel:
    # A channel of its own: grpc would share one connection among a process's channels.
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


def test_a_killed_front_is_started_again_and_a_killed_broker_leaves_no_front(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(NATIVE, SMALL)
    first = _front_pid(broker)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: _children(broker.proc.pid) not in ([], [first]), 20, "a new front")
    assert "the native front exited" in broker.log_text()
    route = _requests()["QueryRoute"]
    wait_for(lambda: call(broker.address, "QueryRoute", route).status.code == pb.OK, 20,
             "the new front to serve")  # fmt: skip
    second = _front_pid(broker)
    broker.proc.send_signal(signal.SIGKILL)
    broker.proc.wait()
    wait_for(lambda: not _alive(second), 20, "the front to end with its broker")
    port = int(broker.address.rsplit(":", 1)[1])
    # A process's descriptors close with its last thread, a moment after it shows as ended.
    wait_for(lambda: port not in _listening_ports(), 20, "nobody to hold the port")


def _listening_ports() -> set[int]:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)")
def test_java_client_sends_acknowledged_before_a_kill_9_are_all_stored(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    from java_client import POM, compile_program
    from peer_common import fetch_jars, java_command

    class_path = compile_program(
        Path(__file__).parent / "java" / "SendUntilKilled.java", fetch_jars("java-client", POM)
    )
    broker = broker_factory(NATIVE, SMALL, "store.flush_policy=SYNC")
    java = subprocess.Popen(
        [*java_command("256m", class_path), "SendUntilKilled", broker.address, "jkill",
         "20000", "64"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    acked: list[str] = []
    try:
        assert java.stdout is not None
        for line in java.stdout:
            if line.startswith("ACK "):
                acked.append(line.split()[1])
            if len(acked) == 2000:  # sends in full flow: kill the broker under them
                broker.proc.send_signal(signal.SIGKILL)
                broker.proc.wait()
                break
        deadline = time.monotonic() + 60
        for line in java.stdout:  # answers that were on their way when it died
            if line.startswith("ACK "):
                acked.append(line.split()[1])
            if line.startswith("DONE") or time.monotonic() > deadline:
                break
    finally:
        java.kill()
        java.wait()
    stored = by_uniq_key([r for r in read_records(broker.store_dir) if r.topic == "jkill"])
    assert len(acked) >= 2000
    assert [message_id for message_id in acked if message_id not in stored] == []


def test_oversized_metadata_is_refused_and_the_relay_keeps_serving(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    # A header of 70,000 bytes does not fit the relay's 16-bit key length: refused at the
    # front, it must not reach the relay and tear down every other client's calls.
    broker = broker_factory(NATIVE, SMALL)
    route = _requests()["QueryRoute"]
    with _channel(broker.address) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        for metadata in ((("x" * 70_000, "v"),), (("x-big", "v" * 70_000),)):
            with pytest.raises(grpc.RpcError):
                stub.QueryRoute(route, metadata=_CLIENT + metadata, timeout=10)
    with _channel(broker.address) as channel:  # the front may close the offending connection
        stub = spb_grpc.MessagingServiceStub(channel)
        assert stub.QueryRoute(route, metadata=_CLIENT, timeout=10).status.code == pb.OK
    assert "relay" not in broker.log_text() and "front exited" not in broker.log_text()
