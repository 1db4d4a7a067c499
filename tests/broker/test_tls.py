"""TLS on the broker's gRPC port: one port serves TLS and plaintext (``tls_mode=permissive``,
as RocketMQ's proxy), ``enforcing`` refuses plaintext with a clear reason, ``disabled`` serves
plaintext only. The official Python client (``tls_enable=True``) round-trips with a
certificate made in the test; without a configured certificate the broker makes a self-signed
one in ``<store>/config/tls/`` and keeps it. The Java and Go clients with their default
configuration (TLS on): ``test_tls_clients.py``.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from broker_harness import REPO_ROOT, BrokerProcess, by_uniq_key, props, read_records

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.broker.security.tls import TLS_DIR, TlsFiles, make_self_signed

# Run in a child: grpc reads GRPC_DEFAULT_SSL_ROOTS_FILE_PATH once, and the official client
# builds its TLS channel from grpc's default roots (it has no option for a CA file).
_ROUND_TRIP = """
import sys, time
import rocketmq
address, count = sys.argv[1], int(sys.argv[2])
config = rocketmq.ClientConfiguration(address, rocketmq.Credentials(), request_timeout=10)
producer = rocketmq.Producer(config, ("tls-topic",), tls_enable=True)
producer.startup()
sent = set()
for i in range(count):
    message = rocketmq.Message()
    message.topic = "tls-topic"
    message.body = f"tls-{i}".encode()
    sent.add(producer.send(message).message_id)
producer.shutdown()
print("SENT", " ".join(sorted(sent)), flush=True)
consumer = rocketmq.SimpleConsumer(
    config, "tls-group", {"tls-topic": rocketmq.FilterExpression("*")}, tls_enable=True
)
consumer.startup()
got = set()
deadline = time.monotonic() + 30
while got != sent and time.monotonic() < deadline:
    for view in consumer.receive(16, 15):
        consumer.ack(view)
        got.add(view.message_id)
consumer.shutdown()
print("RECEIVED", " ".join(sorted(got)), flush=True)
"""


def _certificate(directory: Path) -> tuple[Path, Path]:
    files = make_self_signed(directory, hosts=["localhost", "127.0.0.1"])
    return files.cert_file, files.key_file


def _route(channel: grpc.Channel) -> int:
    stub = spb_grpc.MessagingServiceStub(channel)
    request = spb.QueryRouteRequest(topic=pb.Resource(name="probe"))
    return int(stub.QueryRoute(request, timeout=10).status.code)


def _tls_channel(address: str, cert: Path) -> grpc.Channel:
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(cert.read_bytes()))


def test_python_client_tls_round_trip_with_a_test_made_certificate(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    cert, key = _certificate(tmp_path / "certs")
    broker = broker_factory(f"broker.tls_cert_file={cert}", f"broker.tls_key_file={key}")
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert),
        "PYTHONPATH": str(REPO_ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", _ROUND_TRIP, broker.address, "3"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    lines = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines() if line}
    assert "RECEIVED" in lines, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert len(lines["SENT"]) == 3
    assert lines["RECEIVED"] == lines["SENT"]
    stored = by_uniq_key(read_records(broker.store_dir))
    for message_id in lines["SENT"]:
        (record,) = stored[message_id]
        # The client's address, not the front's connection to grpc.
        assert str(record.born_host).startswith("127.0.0.1:")
        assert props(record)["UNIQ_KEY"] == message_id
    # The same port still serves plaintext (permissive, the default).
    with grpc.insecure_channel(broker.address) as channel:
        assert _route(channel) == pb.OK


def test_self_signed_certificate_is_made_in_the_store_and_kept(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    broker = broker_factory()
    cert, key = broker.store_dir / TLS_DIR / "cert.pem", broker.store_dir / TLS_DIR / "key.pem"
    assert cert.exists()
    assert key.stat().st_mode & 0o077 == 0
    with _tls_channel(broker.address, cert) as channel:
        assert _route(channel) == pb.OK
    first = cert.read_bytes()
    assert broker.stop() == 0
    again = broker_factory(store_dir=broker.store_dir)
    assert cert.read_bytes() == first
    with _tls_channel(again.address, cert) as channel:
        assert _route(channel) == pb.OK


def _public_key(*command: str) -> bytes:
    return subprocess.run(["openssl", *command], capture_output=True, check=True).stdout


@pytest.mark.parametrize("damage", ["empty-cert", "cut-key", "no-key"])
def test_a_self_signed_pair_a_crash_left_damaged_is_made_again_not_served(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "tls"
    cert, key = _certificate(directory)
    if damage == "empty-cert":
        cert.write_bytes(b"")  # renamed before its data reached the disk
    elif damage == "cut-key":
        key.write_bytes(key.read_bytes()[:40])
    else:
        key.unlink()
    with caplog.at_level("WARNING", logger="rmq_spark.broker"):
        again = make_self_signed(directory, hosts=["localhost"])
    assert "self-signed TLS pair" in caplog.text and "damaged" in caplog.text
    cert_key = _public_key("x509", "-in", str(again.cert_file), "-noout", "-pubkey")
    assert cert_key == _public_key("pkey", "-in", str(again.key_file), "-pubout")
    assert again.key_file.stat().st_mode & 0o077 == 0
    assert sorted(p.name for p in directory.iterdir()) == ["cert.pem", "key.pem"]
    kept = again.cert_file.read_bytes()
    assert make_self_signed(directory, hosts=["localhost"]).cert_file.read_bytes() == kept


@pytest.mark.parametrize("front", ["python", "native"])
def test_enforcing_refuses_plaintext_with_a_clear_reason(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path, front: str
) -> None:
    cert, key = _certificate(tmp_path / "certs")
    broker = broker_factory(
        "broker.tls_mode=enforcing",
        f"broker.tls_cert_file={cert}",
        f"broker.tls_key_file={key}",
        f"broker.grpc_front={front}",
    )
    with grpc.insecure_channel(broker.address) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            _route(channel)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "requires TLS" in str(refused.value.details()), refused.value.details()
    with _tls_channel(broker.address, cert) as channel:
        assert _route(channel) == pb.OK
    assert "Traceback" not in broker.log_text()


def test_disabled_serves_plaintext_only(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    broker = broker_factory("broker.tls_mode=disabled")
    assert not (broker.store_dir / TLS_DIR).exists()
    with grpc.insecure_channel(broker.address) as channel:
        assert _route(channel) == pb.OK
    cert, _key = _certificate(tmp_path / "certs")
    with _tls_channel(broker.address, cert) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            _route(channel)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE


def test_the_self_signed_pair_needs_no_openssl_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Made in-process (the ``cryptography`` package): a host without the ``openssl`` command
    still gets a certificate, valid now, naming every host the broker is reached by."""
    from cryptography import x509

    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    files = make_self_signed(tmp_path / "tls", hosts=["localhost", "127.0.0.1", "::1", "b.example"])
    certificate = x509.load_pem_x509_certificate(files.cert_file.read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "b.example"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    assert certificate.not_valid_after_utc.year - certificate.not_valid_before_utc.year >= 9
    assert files.key_file.stat().st_mode & 0o077 == 0
    _handshake(files, server_hostname="b.example")


def _handshake(files: TlsFiles, server_hostname: str) -> None:
    """A TLS handshake in memory: the key matches the certificate, which a client that trusts
    it accepts for ``server_hostname``."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(files.cert_file, files.key_file)
    client = ssl.create_default_context(cadata=files.cert_file.read_text())
    ends = [ssl.MemoryBIO() for _ in range(4)]
    s_side = server.wrap_bio(ends[0], ends[1], server_side=True)
    c_side = client.wrap_bio(ends[2], ends[3], server_hostname=server_hostname)
    for _ in range(10):
        for side in (c_side, s_side):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        ends[0].write(ends[3].read())  # client -> server
        ends[2].write(ends[1].read())  # server -> client
        if c_side.version() and s_side.version():
            try:
                c_side.do_handshake()
                s_side.do_handshake()
                return
            except ssl.SSLWantReadError:
                continue
    raise AssertionError("the TLS handshake did not finish")
