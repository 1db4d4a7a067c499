"""``rmq-spark transactions``: a store with
a committed, a rolled back, a discarded and a pending transaction written by a real broker
process, read while that broker runs, read-only."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_harness import BrokerProcess, wait_for
from tx_helpers import records_of

from rmq_spark.broker.producer import Producer
from rmq_spark.broker.transactions.ledger import pending_counts
from rmq_spark.cli.main import main

FAST = ("broker.transaction_timeout_ms=300", "broker.transaction_check_interval_ms=200")


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.fixture
def store_with_every_state(tx_broker: Callable[..., BrokerProcess]) -> tuple[BrokerProcess, dict]:
    """A running broker whose store holds one transaction in each state; their message ids."""
    broker = tx_broker(*FAST, "broker.transaction_check_max=1")
    ids = {}
    with Producer(broker.address, checker=lambda m: "unknown", transaction_topics=["orders"]) as p:
        committed, rolled = (
            p.send_in_transaction("orders", b"a"),
            p.send_in_transaction("orders", b"b"),
        )
        committed.commit()
        rolled.rollback()
        ids["committed"], ids["rolled_back"] = committed.message_id, rolled.message_id
        ids["discarded"] = p.send_in_transaction("orders", b"c").message_id
    wait_for(lambda: records_of(broker.store_dir, "TRANS_CHECK_MAX_TIME_TOPIC"), 60, "a discard")
    broker.kill()
    broker = tx_broker("broker.transaction_check_interval_ms=3600000", store_dir=broker.store_dir)
    with Producer(broker.address, checker=lambda m: "unknown", transaction_topics=["orders"]) as p:
        ids["pending"] = p.send_in_transaction("orders", b"d", keys=["k"]).message_id
    return broker, ids


def test_transactions_lists_each_state_read_only_while_the_broker_runs(
    store_with_every_state: tuple[BrokerProcess, dict], capsys: pytest.CaptureFixture[str]
) -> None:
    broker, ids = store_with_every_state
    assert main(["transactions", "--store", str(broker.store_dir), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["uniq_key"]: r["state"] for r in rows} == {v: k for k, v in ids.items()}
    by_state = {r["state"]: r for r in rows}
    assert by_state["discarded"]["check_count"] == 1
    assert by_state["committed"]["commit_offset"] > by_state["committed"]["half_offset"]
    assert by_state["rolled_back"]["commit_offset"] == -1
    assert {r["topic"] for r in rows} == {"orders"}
    assert main(["transactions", "--store", str(broker.store_dir), "--state", "pending"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:2] == ["topic", "uniq_key"] and len(table) == 2
    assert ids["pending"] in table[1]
    broker.stop()  # a stopped store: nothing else writes, so any change would be ours
    before = _files(broker.store_dir)
    assert main(["transactions", "--store", str(broker.store_dir)]) == 0
    assert _files(broker.store_dir) == before


def test_a_store_without_transactions_lists_none(
    tx_broker: Callable[..., BrokerProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    broker = tx_broker()
    with Producer(broker.address) as producer:
        producer.send("orders", b"plain")
    assert main(["transactions", "--store", str(broker.store_dir), "--json"]) == 0
    assert capsys.readouterr().out == ""
    assert pending_counts(broker.store_dir) == {}


@pytest.mark.parametrize("kind", ["missing", "file", "empty_dir"])
def test_a_path_that_is_not_a_store_is_one_line(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nowhere"
    if kind == "file":
        path.write_text("x")
    elif kind == "empty_dir":
        path.mkdir()
    assert main(["transactions", "--store", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rmq-spark transactions: error:") and "\n" not in err
    assert "is not a store" in err
    assert os.listdir(tmp_path) == ([] if kind == "missing" else ["nowhere"])
