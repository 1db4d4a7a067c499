"""RocketMQ 4.9.8's Java ``DefaultMQProducer`` (4 threads, routes from the name server, retries
on another broker; its fault table off, as by default: on, it avoids a failed broker for 10
minutes) over two rmq-spark brokers' remoting ports: sends spread over both, go on when one
broker is SIGKILLed, lose no acknowledged message, and reach the broker again after its
restart. The JVM runs under the bench lock with the rest of this directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from cluster_harness import ClusterBroker, create_topic, wait_route
from failover import (
    PER_PHASE,
    Run,
    assert_the_survivor_took_the_sends,
    check_no_acknowledged_loss,
    kill_and_restart,
    record,
    stop_all,
)
from namesrv_harness import REPO_ROOT, Namesrv

from rmq_spark.jvm import java_command

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)"),
]

SOURCE = Path(__file__).parent / "java" / "ClusterProducer4.java"
JARS_DIR = Path(os.environ.get("RMQ_SPARK_ROCKETMQ4_JARS", REPO_ROOT / "jars" / "rocketmq4"))


def rocketmq4_jars() -> list[Path]:
    """The 4.9.8 client's jars (as tests/remoting/java4.py finds them), fetched when missing."""
    manifest = JARS_DIR / "manifest.txt"
    if not manifest.is_file():
        subprocess.run([str(REPO_ROOT / "scripts" / "fetch_rocketmq4_jars.sh")], check=True,
                       timeout=1800)  # fmt: skip
    return [JARS_DIR / line.strip() for line in manifest.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def class_path(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    jars = rocketmq4_jars()
    classes = tmp_path_factory.mktemp("classes")
    subprocess.run(["javac", "-d", str(classes), "-cp", os.pathsep.join(map(str, jars)),
                    str(SOURCE)], check=True, capture_output=True, timeout=300)  # fmt: skip
    return [*jars, classes]


def test_java4_producer_keeps_sending_across_a_broker_kill_and_loses_nothing(
    namesrv: Namesrv, brokers: list[ClusterBroker], class_path: list[Path], tmp_path: Path
) -> None:
    create_topic(namesrv, "KillJava4")
    for broker in brokers:
        wait_route(broker.address, "KillJava4", {"broker-a", "broker-b"})
    home = tmp_path / "home"
    home.mkdir()
    command = [*java_command("256m", class_path, f"-Duser.home={home}"), "ClusterProducer4",
               namesrv.addr, "KillJava4", "4"]  # fmt: skip
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, cwd=home, env={"HOME": str(home), "PATH": os.environ.get("PATH", "")},
    )  # fmt: skip
    run, tail = Run(), []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            record(run, line.strip())
            tail[:] = [*tail[-20:], line]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        kill_and_restart(run, namesrv, brokers, per_phase=PER_PHASE, deadline_s=120)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the program stops its threads and prints DONE
        proc.wait(timeout=120)
        reader.join(timeout=30)
        stop_all(brokers)
    assert tail and tail[-1].strip() == "DONE", "".join(tail)
    per_broker = check_no_acknowledged_loss(run, brokers)
    print(f"java 4.9.8: acked per broker {per_broker}, failed {run.failed}")
    assert_the_survivor_took_the_sends(run)
