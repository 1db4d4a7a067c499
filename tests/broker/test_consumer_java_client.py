"""The official rocketmq-client-java 5.0.8 consumes from a broker subprocess, unchanged.

``java/ConsumeCheck.java`` runs a PushConsumer (its listener fails one message's first
attempt) and a SimpleConsumer of another group. The PushConsumer needs the consumer settings
reply to carry a backoff policy (without one it stops at start-up: "Unrecognized backoff
policy strategy"). The jar comes from ``bench/peers`` (fetched once from Maven Central).
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

PEERS = REPO_ROOT / "bench" / "peers"
if str(PEERS) not in sys.path:
    sys.path.insert(0, str(PEERS))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)"),
]


def _class_path() -> list[Path]:
    from java_client import POM, compile_program
    from peer_common import fetch_jars

    return compile_program(
        Path(__file__).parent / "java" / "ConsumeCheck.java", fetch_jars("java-client", POM)
    )


def test_java_push_and_simple_consumers_consume_and_retry(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
    tmp_path: Path,
) -> None:
    from peer_common import java_command

    class_path = _class_path()
    broker = broker_factory("broker.default_queue_count=2")
    producer = official_producer(broker.address, ("java-topic",))
    sent = {}
    for body in ("fine", "fail once", "also fine"):
        message = rocketmq.Message()
        message.topic = "java-topic"
        message.body = body.encode()
        sent[producer.send(message).message_id] = body.replace(" ", "_")
    command = [*java_command("256m", class_path), "ConsumeCheck", broker.address, "java-topic", "3"]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    lines = done.stdout.splitlines()
    assert lines and lines[-1] == "DONE", f"{done.stdout[-2000:]}\n{done.stderr[:2000]}"
    push = [tuple(line.split()[1:4]) for line in lines if line.startswith("PUSH ")]
    simple = [tuple(line.split()[1:4]) for line in lines if line.startswith("SIMPLE ")]
    assert sorted((mid, body) for mid, _attempt, body in simple) == sorted(sent.items())
    assert {attempt for _mid, attempt, _body in simple} == {"1"}
    failed = next(mid for mid, body in sent.items() if body == "fail_once")
    assert [attempt for mid, attempt, _body in push if mid == failed] == ["1", "2"]
    for mid in sent:
        if mid != failed:
            assert [attempt for m, attempt, _body in push if m == mid] == ["1"]
