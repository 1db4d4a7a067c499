"""The official rocketmq-client-java 5.x transactional Producer against a broker process: a
commit, a rollback, and two halves left open whose fate the broker's check-back asks the
producer's TransactionChecker about (one committed, one rolled back); the official Java
SimpleConsumer receives the two committed messages exactly once and nothing else.

The JVM (javac and the run) holds the machine-wide bench lock while it runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_harness import REPO_ROOT, BrokerProcess
from tx_helpers import OP, records_of

from rmq_spark.jvm import java_command

PEERS = REPO_ROOT / "bench" / "peers"
if str(PEERS) not in sys.path:
    sys.path.insert(0, str(PEERS))

pytestmark = [
    pytest.mark.bench_lock,
    pytest.mark.slow,
    pytest.mark.timeout(1800),  # the bench lock may be another suite's for minutes
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)"),
]

LOCK = ("flock", "-o", "/tmp/bench.lock")  # -o: a child left behind holds no lock
SOURCE = Path(__file__).parent / "java" / "TxProducer5.java"


def _class_path(classes: Path) -> list[Path]:
    from java_client import POM
    from peer_common import fetch_jars

    jars = fetch_jars("java-client", POM)
    classes.mkdir(parents=True, exist_ok=True)
    cp = ":".join(map(str, jars))
    subprocess.run(
        [*LOCK, "javac", "-d", str(classes), "-cp", cp, str(SOURCE)],
        check=True, capture_output=True, timeout=1200,
    )  # fmt: skip
    return [*jars, classes]


def test_java5_transaction_producer_commit_rollback_and_check_back_consumed_once(
    tx_broker: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    broker = tx_broker(
        "broker.transaction_timeout_ms=500", "broker.transaction_check_interval_ms=300"
    )
    class_path = _class_path(tmp_path / "classes")
    home = tmp_path / "home"
    home.mkdir()
    bodies = ("commit", "rollback", "check-commit", "check-rollback")
    done = subprocess.run(
        [*LOCK, *java_command("256m", class_path, f"-Duser.home={home}"), "TxProducer5",
         broker.address, "JTx5", "java-tx5", "2", *bodies],
        capture_output=True, text=True, timeout=1500, check=False,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert lines and lines[-1] == "DONE", f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert [line for line in lines if line.startswith("SENT ")] == [f"SENT {b}" for b in bodies]
    checked = {line.split()[1] for line in lines if line.startswith("CHECKED ")}
    assert checked == {"check-commit", "check-rollback"}, lines
    received = sorted(line.split()[1] for line in lines if line.startswith("RECV "))
    assert received == ["check-commit", "commit"], lines
    stored = sorted(r.body for r in records_of(broker.store_dir, "JTx5"))
    assert stored == [b"check-commit", b"commit"]
    assert len(records_of(broker.store_dir, OP)) == 4
