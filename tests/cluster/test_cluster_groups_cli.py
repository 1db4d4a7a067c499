"""``rmq-spark groups --namesrv HOST:PORT GROUP``: one group across two rmq-spark brokers found
through a real name server (per broker: queues, committed offsets, lag); a broker that does not
answer (SIGSTOPped) is named on stderr with its address, and the other's rows are kept."""

from __future__ import annotations

import json
import os
import signal
from types import ModuleType

import pytest
from broker.broker_harness import wait_for
from cluster_harness import ClusterBroker, create_topic, wait_route
from namesrv_harness import Namesrv, free_port

from rmq_spark.broker.producer import Producer
from rmq_spark.cli.main import EXIT_ERROR, main

pytestmark = pytest.mark.slow

TOPIC = "Invoices"
GROUP = "payers"


def _groups(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict], str]:
    code = main(["groups", *args, "--json"])
    captured = capsys.readouterr()
    return code, [json.loads(line) for line in captured.out.splitlines()], captured.err


def _per_broker(rows: list[dict]) -> dict[str, tuple[int, int, int]]:
    """broker -> (queues, committed total, lag total)."""
    found: dict[str, tuple[int, int, int]] = {}
    for row in rows:
        queues, offset, lag = found.get(row["broker"], (0, 0, 0))
        found[row["broker"]] = (queues + 1, offset + row["offset"], lag + row["lag"])
    return found


def test_groups_shows_a_group_on_every_broker_and_names_one_that_does_not_answer(
    namesrv: Namesrv, brokers: list[ClusterBroker], rocketmq: ModuleType,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    a, b = brokers
    create_topic(namesrv, TOPIC)
    wait_route(a.address, TOPIC, {"broker-a", "broker-b"})
    with Producer(a.address) as producer:
        owners = [producer.send(TOPIC, f"i{i}".encode()).broker for i in range(40)]
    config = rocketmq.ClientConfiguration(a.address, rocketmq.Credentials(), request_timeout=5)
    subscription = {TOPIC: rocketmq.FilterExpression("*")}
    consumer = rocketmq.SimpleConsumer(config, GROUP, subscription, await_duration=2)
    consumer.startup()
    acked = 0
    try:
        while acked < 40:
            for message in consumer.receive(32, 30):
                consumer.ack(message)
                acked += 1
    finally:
        consumer.shutdown()
    with Producer(a.address) as producer:
        owners_after = [producer.send(TOPIC, b"late").broker for _ in range(10)]
    expected = {
        name: (4, owners.count(name), owners_after.count(name)) for name in ("broker-a", "broker-b")
    }
    wait_for(lambda: _per_broker(_groups(capsys, "--namesrv", namesrv.addr, GROUP)[1])
             == expected, 30, f"groups to show {expected}")  # fmt: skip

    assert b.proc is not None
    os.kill(b.proc.proc.pid, signal.SIGSTOP)  # listed, connected, silent
    try:
        code, rows, err = _groups(capsys, "--namesrv", namesrv.addr, GROUP, "--timeout", "1")
    finally:
        os.kill(b.proc.proc.pid, signal.SIGCONT)
    assert code == 1
    assert _per_broker(rows) == {"broker-a": expected["broker-a"]}
    assert f"broker broker-b (127.0.0.1:{b.remoting_port}): unreachable: no answer in 1 s" in err


def test_groups_without_a_name_server_answering_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dead = f"127.0.0.1:{free_port()}"
    code, rows, err = _groups(capsys, "--namesrv", dead, GROUP, "--timeout", "1")
    assert (code, rows) == (EXIT_ERROR, [])
    assert err.startswith(f"rmq-spark groups: error: no name server answered ({dead}: ")
    assert len(err.strip().splitlines()) == 1
    code, _, err = _groups(capsys, "--namesrv", "nohost", GROUP)
    assert code == EXIT_ERROR and "--namesrv" in err
