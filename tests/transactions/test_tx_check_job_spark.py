"""Spark as the check service: ``jobs/txcheck.py`` finds the halves with Spark (the
``rocketmq`` source, ``read_uncommitted``) and has the broker check them: the producer's
checker commits one (delivered once) and rolls back another (never delivered)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from broker_harness import REPO_ROOT, BrokerProcess, bench_lock, wait_for
from test_tx_check_back import _decide
from tx_helpers import HALF, received_bodies, records_of, send_half
from txcheck_helpers import JOB

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.bench_lock]

TIMEOUT = "broker.transaction_timeout_ms=300"


def test_the_spark_job_checks_the_orphaned_halves(
    tx_broker: Callable[..., BrokerProcess], tx_clients: Callable[..., Any], rocketmq: ModuleType
) -> None:
    broker = tx_broker(TIMEOUT, JOB)
    tx_clients("producer", broker.address, ("orders",), _decide(rocketmq))
    crashing = tx_clients("producer", broker.address, ("orders",), lambda m: 0)
    for body in (b"commit me", b"roll me back"):
        send_half(rocketmq, crashing, "orders", body)
    crashing.shutdown()
    time.sleep(0.5)  # past the timeout
    command = [sys.executable, str(REPO_ROOT / "jobs" / "txcheck.py"), "--once"]
    command += ["--store", str(broker.store_dir), "--broker", broker.address]
    command += ["--set", TIMEOUT, "--set", "spark.master=local[1]"]
    with bench_lock():
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, check=False
        )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["source"] == "spark" and report["checked"] == 2, report
    assert len(records_of(broker.store_dir, HALF)) == 4  # two halves, two re-puts
    consumer = tx_clients("simple", broker.address, "billing", ("orders",))
    seen = wait_for(lambda: received_bodies(consumer, rounds=1), 30, "the committed half")
    seen += received_bodies(consumer, rounds=2)
    assert seen == [b"commit me"]
