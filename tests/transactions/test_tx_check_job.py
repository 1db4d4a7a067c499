"""The check-back run by the ``rmq-spark txcheck`` job (``broker.transaction_check = job``):
the broker does not check by itself; the job's passes have it re-put and ask the producers,
whose checker commits one half (delivered once), rolls back another (never delivered) and
cannot tell for a third (discarded after ``transaction_check_max`` checks). A broker that
checks itself refuses the job."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from broker_harness import BrokerProcess, props, wait_for
from test_tx_check_back import DISCARD, MAX_2, _decide
from tx_helpers import HALF, OP, received_bodies, records_of, send_half
from txcheck_helpers import JOB, check_times_by_body, txcheck_once

TIMEOUT = "broker.transaction_timeout_ms=300"
BROKER_SCANS = "broker.transaction_check_interval_ms=100"  # were the broker checking: often


def test_the_job_checks_commits_rolls_back_and_discards(
    tx_broker: Callable[..., BrokerProcess], tx_clients: Callable[..., Any], rocketmq: ModuleType
) -> None:
    broker = tx_broker(TIMEOUT, BROKER_SCANS, MAX_2, JOB)
    tx_clients("producer", broker.address, ("orders",), _decide(rocketmq))  # the survivor
    crashing = tx_clients("producer", broker.address, ("orders",), lambda m: 0)
    for body in (b"commit me", b"roll me back", b"nobody knows"):
        send_half(rocketmq, crashing, "orders", body)
    crashing.shutdown()  # before any EndTransaction
    time.sleep(1.5)  # well past the timeout: a broker checking itself would have re-put them
    assert len(records_of(broker.store_dir, HALF)) == 3
    passes = []
    while not records_of(broker.store_dir, DISCARD):
        done = txcheck_once(broker, TIMEOUT, MAX_2)
        assert done.returncode == 0, done.stderr
        passes.append(json.loads(done.stdout.strip().splitlines()[-1]))
        assert "txcheck pass" in done.stderr
        assert len(passes) < 20, passes
        time.sleep(0.3)  # the producer's answers
    assert passes[0]["checked"] == 3 and passes[0]["asked"] >= 3, passes
    assert sum(p["checked"] for p in passes) == 4 and sum(p["discarded"] for p in passes) == 1
    [lost] = records_of(broker.store_dir, DISCARD)
    assert lost.body == b"nobody knows"
    assert props(lost)["TRANSACTION_CHECK_TIMES"] == "2"
    assert check_times_by_body(broker.store_dir)[b"nobody knows"] == [0, 1, 2]
    wait_for(lambda: "discarded after 2 checks" in broker.log_text(), 30, "the discard's log")
    consumer = tx_clients("simple", broker.address, "billing", ("orders",))
    seen = wait_for(lambda: received_bodies(consumer, rounds=1), 30, "the committed half")
    seen += received_bodies(consumer, rounds=2)
    assert seen == [b"commit me"]
    assert len(records_of(broker.store_dir, OP)) == 2  # commit and rollback
    again = txcheck_once(broker, TIMEOUT, MAX_2)  # nothing left: all passed
    assert json.loads(again.stdout.strip().splitlines()[-1])["checked"] == 0


def test_a_broker_that_checks_itself_refuses_the_job(
    tx_broker: Callable[..., BrokerProcess],
) -> None:
    broker = tx_broker()
    done = txcheck_once(broker)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()[-1:]
    assert "broker.transaction_check = broker" in line and "Traceback" not in done.stderr
