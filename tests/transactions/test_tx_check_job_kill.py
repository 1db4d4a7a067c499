"""kill -9 the txcheck job at random moments while it checks 60 orphaned halves (a third its
producer's checker commits, a third it rolls back, a third it cannot tell), restarting it
each time: every half is checked the counted number of times (its copies' check counts are
0, 1, 2, ... once each), the undecided ones are discarded once after six checks, and each
committed one is stored and delivered once."""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from broker_harness import BrokerProcess, props, wait_for
from test_tx_check_back import DISCARD
from tx_helpers import received_bodies, records_of, send_half
from txcheck_helpers import JOB, check_times_by_body, txcheck_process

pytestmark = pytest.mark.slow

CHECKS = 6
SETTINGS = ("broker.transaction_timeout_ms=300", f"broker.transaction_check_max={CHECKS}")
KILLS = 6


def _decide(rocketmq: ModuleType) -> Callable[[Any], Any]:
    resolution = rocketmq.TransactionResolution
    answers = {b"c": resolution.COMMIT, b"r": resolution.ROLLBACK}
    return lambda message: answers.get(bytes(message.body)[:1], 0)


def test_a_killed_job_checks_each_half_the_counted_number_of_times(
    tx_broker: Callable[..., BrokerProcess],
    tx_clients: Callable[..., Any],
    rocketmq: ModuleType,
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("CHAOS_SEED", random.randrange(2**32)))
    chance = random.Random(seed)
    broker = tx_broker(*SETTINGS, JOB)
    tx_clients("producer", broker.address, ("orders",), _decide(rocketmq))  # the survivor
    crashing = tx_clients("producer", broker.address, ("orders",), lambda m: 0)
    bodies = [f"{kind}{i}".encode() for kind in "cru" for i in range(20)]
    for body in bodies:
        send_half(rocketmq, crashing, "orders", body)
    crashing.shutdown()
    log = tmp_path / "txcheck.log"
    args = ("--interval", "200ms")
    for started in range(1, KILLS + 1):
        job = txcheck_process(broker, log, *args, settings=SETTINGS)
        running = lambda n=started: log.read_text().count("txcheck running") == n  # noqa: E731
        wait_for(running, 60, "the job to start")
        time.sleep(chance.uniform(0.0, 0.5))  # inside a pass, or between two
        job.send_signal(signal.SIGKILL)
        job.wait(30)
    job = txcheck_process(broker, log, *args, settings=SETTINGS)
    try:
        wait_for(lambda: len(records_of(broker.store_dir, DISCARD)) == 20, 180, "20 discards")
    finally:
        job.terminate()
        job.wait(30)
    assert "txcheck pass" in log.read_text(), log.read_text()
    times = check_times_by_body(broker.store_dir)
    for body in bodies:
        assert times[body] == list(range(len(times[body]))), (seed, body, times[body])
        if body.startswith(b"u"):
            assert times[body] == list(range(CHECKS + 1)), (seed, body)
    discarded = records_of(broker.store_dir, DISCARD)
    assert sorted(r.body for r in discarded) == sorted(b for b in bodies if b.startswith(b"u"))
    assert {props(r)["TRANSACTION_CHECK_TIMES"] for r in discarded} == {str(CHECKS)}
    committed = sorted(r.body for r in records_of(broker.store_dir, "orders"))
    assert committed == sorted(b for b in bodies if b.startswith(b"c")), seed
    consumer = tx_clients("simple", broker.address, "billing", ("orders",))
    seen: list[bytes] = []
    wait_for(lambda: len(seen.__iadd__(received_bodies(consumer, 1))) >= 20, 60, "20 messages")
    seen += received_bodies(consumer, rounds=2)
    assert sorted(seen) == committed, seed
