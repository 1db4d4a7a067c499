"""The official Java (5.0.8) and Go (5.1.4) clients with their DEFAULT configuration connect.

Both default to TLS and trust any certificate (Java ``enableSsl`` true, Go ``EnableSsl``
true with ``InsecureSkipVerify``); before the broker served TLS they failed (``UNAVAILABLE
... SslHandler``; ``context deadline exceeded``). The broker here serves a certificate made
in the test (Java) or the self-signed one it makes itself (Go), on its one port
(``tls_mode=permissive``); ``java/TlsCheck.java`` produces and consumes, ``go/consumecheck
... tls`` consumes with a push and a simple consumer.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from broker_harness import REPO_ROOT, BrokerProcess
from test_consumer_go_client import _build

from rmq_spark.broker.security.tls import make_self_signed

PEERS = REPO_ROOT / "bench" / "peers"
if str(PEERS) not in sys.path:
    sys.path.insert(0, str(PEERS))

pytestmark = [pytest.mark.slow]


def _tls_broker(factory: Callable[..., BrokerProcess], tmp_path: Path) -> BrokerProcess:
    files = make_self_signed(tmp_path / "certs", hosts=["localhost", "127.0.0.1"])
    return factory(
        "broker.default_queue_count=2",
        f"broker.tls_cert_file={files.cert_file}",
        f"broker.tls_key_file={files.key_file}",
    )


@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)")
def test_java_client_default_config_produces_and_consumes_over_tls(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    from java_client import POM, compile_program
    from peer_common import fetch_jars, java_command

    class_path = compile_program(
        Path(__file__).parent / "java" / "TlsCheck.java", fetch_jars("java-client", POM)
    )
    broker = _tls_broker(broker_factory, tmp_path)
    done = subprocess.run(
        [*java_command("256m", class_path), "TlsCheck", broker.address, "java-tls-topic", "3"],
        capture_output=True,
        text=True,
        timeout=180,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    lines = done.stdout.splitlines()
    assert lines and lines[-1] == "DONE", f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    sent = {line.split()[1] for line in lines if line.startswith("SENT ")}
    received = {line.split()[1] for line in lines if line.startswith("RECEIVED ")}
    assert len(sent) == 3
    assert received == sent


@pytest.mark.skipif(shutil.which("go") is None, reason="needs a Go toolchain (go)")
def test_go_client_default_enable_ssl_consumes_over_tls(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
    tmp_path: Path,
) -> None:
    binary = _build(tmp_path)
    broker = broker_factory("broker.default_queue_count=2")  # its own self-signed certificate
    producer = official_producer(broker.address, ("go-tls-topic",))  # plaintext, same port
    sent = {}
    for body in ("fine", "fail once", "also fine"):
        message = rocketmq.Message()
        message.topic = "go-tls-topic"
        message.body = body.encode()
        sent[producer.send(message).message_id] = body.replace(" ", "_")
    done = subprocess.run(
        [str(binary), broker.address, "go-tls-topic", "3", "tls"],
        capture_output=True,
        text=True,
        timeout=180,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    lines = done.stdout.splitlines()
    assert lines and lines[-1] == "DONE", f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    simple = {line.split()[1]: line.split()[3] for line in lines if line.startswith("SIMPLE ")}
    assert simple == sent
