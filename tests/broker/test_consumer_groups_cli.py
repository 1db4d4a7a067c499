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


def _store_with_billing(root: Path) -> None:
    with Broker(root, broker_config=BrokerConfig(default_queue_count=1)) as broker:
        for i in range(3):
            broker.send("orders", f"o{i}".encode())
        consumer = broker.consumer("billing", "orders")
        got = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=5_000)
        consumer.ack(got[0])
    assert read_consumer_offsets(root)[("orders", "billing")] == {0: 1}


def test_typos_create_nothing_and_a_reset_can_be_looked_at_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    _store_with_billing(root)
    offsets = (root / "config" / "consumerOffset.json").read_bytes()
    assert main(["groups", "--store", str(tmp_path / "stroe")]) == EXIT_ERROR
    assert "is not a store: it does not exist" in capsys.readouterr().err
    reset = ["groups", "reset", "--store", str(root), "--topic", "orders", "--to-offset", "0"]
    assert main([*reset, "--group", "bliling"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "'bliling' is not a group of" in err and "--create" in err and err.count("\n") == 1
    assert main([*reset, "--group", "billing", "--dry-run"]) == 0
    assert _lines(capsys) == [
        {"group": "billing", "topic": "orders", "queue_id": 0, "offset": 0, "dry_run": True}
    ]
    assert (root / "config" / "consumerOffset.json").read_bytes() == offsets
    assert main([*reset, "--group", "audit", "--create"]) == 0
    capsys.readouterr()
    assert read_consumer_offsets(root)[("orders", "audit")] == {0: 0}


@pytest.mark.parametrize("answer", ["n", "y"])
def test_on_a_terminal_a_reset_asks_first(tmp_path: Path, answer: str) -> None:
    import os
    import pty
    import subprocess
    import sys

    root = tmp_path / "store"
    _store_with_billing(root)
    primary, secondary = pty.openpty()
    argv = ["groups", "reset", "--store", str(root), "--group", "billing", "--topic", "orders"]
    process = subprocess.Popen(
        [sys.executable, "-m", "rmq_spark.cli.main", *argv, "--to-offset", "0"],
        stdin=secondary, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(secondary)
    os.write(primary, f"{answer}\n".encode())
    out, err = process.communicate(timeout=60)
    os.close(primary)
    assert b'"dry_run": true' in out, (out, err)
    expected = {0: 0} if answer == "y" else {0: 1}
    assert process.returncode == (0 if answer == "y" else 1)
    assert read_consumer_offsets(root)[("orders", "billing")] == expected
