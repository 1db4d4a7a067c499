"""``rmq-spark groups`` (positions, lag, in-flight, retry and DLQ depth, read-only while a
broker runs) and ``rmq-spark groups reset`` (refused while a broker holds the store)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.config_files.rocketmq_config_files import (
    SubscriptionGroups,
    read_consumer_offsets,
)
from rmq_spark.broker.embedded import Broker
from rmq_spark.cli.main import EXIT_ERROR, main
from rmq_spark.clock import ManualClock

_INVISIBLE_MS = 10_000


def _lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_groups_shows_lag_in_flight_and_dlq_while_the_broker_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock, root = ManualClock(), tmp_path / "store"
    SubscriptionGroups(root).update("billing", retry_max_times=0)
    with Broker(root, broker_config=BrokerConfig(default_queue_count=1), clock=clock) as broker:
        for i in range(5):
            broker.send("orders", f"o{i}".encode())
        # A receive answers with what is dispatched when it looks: let all five be.
        assert broker.store.consume_queues.wait_dispatched(broker.store.confirmed_offset, 10)
        consumer = broker.consumer("billing", "orders")
        got = consumer.receive(max_messages=3, invisible_ms=_INVISIBLE_MS, wait_ms=5_000)
        assert len(got) == 3
        consumer.ack(got[0])
        consumer.ack(got[2])
        broker.consume._saver.save_now()
        assert main(["groups", "--store", str(root), "--json"]) == 0
        [row] = _lines(capsys)
        assert (row["group"], row["topic"], row["queue_id"]) == ("billing", "orders", 0)
        assert (row["offset"], row["max_offset"], row["lag"], row["in_flight"]) == (1, 5, 4, 1)
        assert row["lag_bytes"] > 0 and row["dlq_depth"] == 0

        clock.advance(_INVISIBLE_MS)  # o1 out of attempts (retry max 0): to the DLQ
        rest = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=5_000)
        assert sorted(m.body for m in rest) == [b"o3", b"o4"]
        broker.consume._saver.save_now()
        assert main(["groups", "--store", str(root), "--json"]) == 0
        [row] = _lines(capsys)
        assert (row["offset"], row["in_flight"], row["dlq_depth"]) == (3, 2, 1)
        assert main(["groups", "--store", str(root)]) == 0
        table = capsys.readouterr().out.splitlines()
        assert table[0].split()[:3] == ["group", "topic", "queue_id"]
        assert table[1].split()[:4] == ["billing", "orders", "0", "3"]

        code = main(
            [
                "groups",
                "reset",
                "--store",
                str(root),
                "--group",
                "billing",
                "--topic",
                "orders",
                "--to-offset",
                "0",
            ]
        )
        assert code == EXIT_ERROR
        assert "a broker has the store open" in capsys.readouterr().err


def test_reset_by_offset_and_by_time_rewrites_the_offsets_and_clears_in_flight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock, root = ManualClock(), tmp_path / "store"
    with Broker(root, broker_config=BrokerConfig(default_queue_count=1), clock=clock) as broker:
        broker.send("orders", b"early")
        clock.advance(60_000)
        middle_ms = clock.now_ms()
        broker.send("orders", b"late-1")
        broker.send("orders", b"late-2")
        consumer = broker.consumer("billing", "orders")
        got = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=5_000)
        while len(got) < 3:
            got += consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=5_000)
        consumer.ack(got[0])  # the rest stay in flight
    assert read_consumer_offsets(root)[("orders", "billing")] == {0: 1}

    args = ["groups", "reset", "--store", str(root), "--group", "billing", "--topic", "orders"]
    assert main([*args, "--to-offset", "99"]) == 0  # clamped to the queue's end
    assert _lines(capsys) == [{"group": "billing", "topic": "orders", "queue_id": 0, "offset": 3}]
    assert read_consumer_offsets(root)[("orders", "billing")] == {0: 3}
    inflight = json.loads((root / "config" / "consumerInflight.json").read_text())
    assert "orders@billing" not in inflight["inflightTable"]

    assert main([*args, "--to-time", str(middle_ms)]) == 0
    assert read_consumer_offsets(root)[("orders", "billing")] == {0: 1}
    capsys.readouterr()
    with Broker(root, broker_config=BrokerConfig(default_queue_count=1), clock=clock) as broker:
        consumer = broker.consumer("billing", "orders")
        again = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=5_000)
        while len(again) < 2:
            again += consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=5_000)
        assert sorted(m.body for m in again) == [b"late-1", b"late-2"]
        assert {m.delivery_attempt for m in again} == {1}  # in-flight state was dropped
