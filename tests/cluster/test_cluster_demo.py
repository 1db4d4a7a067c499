"""``rmq-spark demo --brokers 2`` (``make cluster``), short: RocketMQ's NameServer, two broker
processes, official-client producers and a push consumer, the reput job over both stores,
broker-b SIGKILLed and restarted mid-run; every acknowledged message is in ``rmq.messages``
(none twice in one store), every one was consumed, and the longest producer pause is printed.
Starts Spark and the name server's JVM: run under the bench lock with this directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from namesrv_harness import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def test_the_cluster_demo_survives_a_broker_kill_and_passes_its_checks(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "demo", "--brokers", "2",
         "--duration", "15s", "--rate", "10", "--workdir", str(workdir)],
        capture_output=True, text=True, timeout=900, check=False, cwd=REPO_ROOT,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert "demo: broker-b: killed with SIGKILL" in output
    assert "demo: broker-b: restarted on the same ports and store" in output
    assert "longest pause any producer saw:" in output
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["acked"] > 0
    assert (summary["missing"], summary["duplicated_in_a_store"], summary["not_consumed"]) == (
        0, 0, 0,
    )  # fmt: skip
    assert set(summary["acked_per_broker"]) == {"broker-a", "broker-b"}
    assert summary["longest_producer_pause_s"] > 0
