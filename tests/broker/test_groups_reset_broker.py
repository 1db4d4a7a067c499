"""``rmq-spark groups reset --broker``: an operator moves a group back through the running
broker (mqadmin resetOffsetByTime's job), which refuses while consumers of the group are
connected and, once they stopped, makes the group receive the messages again."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from broker_harness import BrokerProcess

from rmq_spark.cli.main import main

pytestmark = pytest.mark.slow


def _consumer(rocketmq: ModuleType, address: str) -> Any:
    config = rocketmq.ClientConfiguration(address, rocketmq.Credentials(), request_timeout=5)
    client = rocketmq.SimpleConsumer(
        config, "resettable", {"reset-topic": rocketmq.FilterExpression("*")}, await_duration=2
    )
    client.startup()
    return client


def _drain(client: Any, count: int) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        for message in client.receive(16, 30):
            got.append(message.body)
            client.ack(message)
    return got


def test_reset_through_the_broker_waits_for_the_consumers_to_stop(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
    capsys: pytest.CaptureFixture[str],
) -> None:
    broker = broker_factory("broker.default_queue_count=1")
    producer = official_producer(broker.address, ("reset-topic",))
    for i in range(3):
        message = rocketmq.Message()
        message.topic = "reset-topic"
        message.body = b"m%d" % i
        producer.send(message)
    consumer = _consumer(rocketmq, broker.address)
    assert sorted(_drain(consumer, 3)) == [b"m0", b"m1", b"m2"]
    argv = ["groups", "reset", "--store", str(broker.store_dir), "--broker", broker.address,
            "--group", "resettable", "--topic", "reset-topic", "--to-offset", "0"]  # fmt: skip
    capsys.readouterr()
    assert main(argv) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "1 consumer(s) connected" in err[0], err
    consumer.shutdown()  # NotifyClientTermination: the broker forgets it
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["offset"] == 0
    again = _consumer(rocketmq, broker.address)
    try:
        assert sorted(_drain(again, 3)) == [b"m0", b"m1", b"m2"]
    finally:
        again.shutdown()
