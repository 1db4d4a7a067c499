"""The official rocketmq-clients Go v5 client (5.1.4) consumes from a broker subprocess, unchanged.

``go/consumecheck`` runs a PushConsumer (its listener fails one message's first attempt) and a
SimpleConsumer of another group, as ``test_consumer_java_client.py`` does with the Java client.
Without a complete consumer settings reply the Go PushConsumer never receives (it retries
QueryAssignment every 5 s). The module comes from the Go module proxy (go.sum pins it) and the
binary is built once into ``.cache/go``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from broker_harness import REPO_ROOT, BrokerProcess

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("go") is None, reason="needs a Go toolchain (go)"),
]

PROGRAM = Path(__file__).parent / "go" / "consumecheck"


def _build(tmp_path: Path) -> Path:
    binary = REPO_ROOT / ".cache" / "go" / "consumecheck"
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
    built = subprocess.run(
        ["go", "build", "-o", str(binary), "."],
        cwd=PROGRAM,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return binary


def test_go_push_and_simple_consumers_consume_and_retry(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
    tmp_path: Path,
) -> None:
    binary = _build(tmp_path)
    broker = broker_factory("broker.default_queue_count=2")
    producer = official_producer(broker.address, ("go-topic",))
    sent = {}
    for body in ("fine", "fail once", "also fine"):
        message = rocketmq.Message()
        message.topic = "go-topic"
        message.body = body.encode()
        sent[producer.send(message).message_id] = body.replace(" ", "_")
    done = subprocess.run(
        [str(binary), broker.address, "go-topic", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    lines = done.stdout.splitlines()
    assert lines and lines[-1] == "DONE", f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    push = [tuple(line.split()[1:4]) for line in lines if line.startswith("PUSH ")]
    simple = [tuple(line.split()[1:4]) for line in lines if line.startswith("SIMPLE ")]
    assert sorted((mid, body) for mid, _attempt, body in simple) == sorted(sent.items())
    assert {attempt for _mid, attempt, _body in simple} == {"1"}
    failed = next(mid for mid, body in sent.items() if body == "fail_once")
    assert [attempt for mid, attempt, _body in push if mid == failed] == ["1", "2"]
    for mid in sent:
        if mid != failed:
            assert [attempt for m, attempt, _body in push if m == mid] == ["1"]
