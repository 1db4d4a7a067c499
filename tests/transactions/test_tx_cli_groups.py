"""``rmq-spark groups`` shows pending transactions: per topic and queue, as a column of the
group rows and a footer that also names topics no group consumes."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from broker_harness import BrokerProcess

from rmq_spark.broker.producer import Producer
from rmq_spark.cli.main import main

SLOW_CHECK = "broker.transaction_check_interval_ms=3600000"


def test_groups_counts_pending_transactions_per_topic_and_queue(
    tx_broker: Callable[..., BrokerProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    broker = tx_broker(SLOW_CHECK)
    with Producer(broker.address, checker=lambda m: "unknown", transaction_topics=["orders"]) as p:
        p.send_in_transaction("orders", b"done").commit()
        pending = [p.send_in_transaction("orders", b"open") for _ in range(3)]
        p.send_in_transaction("orders", b"undone").rollback()
    queues: dict[int, int] = {}
    for handle in pending:
        queue_id = _queue_of(broker, handle.message_id)
        queues[queue_id] = queues.get(queue_id, 0) + 1
    broker.stop()  # it would save its own (empty) offsets over ours
    offsets = broker.store_dir / "config" / "consumerOffset.json"
    table = {"orders@billing": {str(q): 0 for q in range(8)}}
    offsets.parent.mkdir(exist_ok=True)
    offsets.write_text(json.dumps({"offsetTable": table}))
    assert main(["groups", "--store", str(broker.store_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[-1] == "pending_tx"
    for queue_id, count in queues.items():
        assert f"  orders queue {queue_id}: {count}" in out
    assert main(["groups", "--store", str(broker.store_dir), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["queue_id"]: r["pending_tx"] for r in rows if r["pending_tx"]} == queues
    assert sum(r["pending_tx"] for r in rows) == 3


def _queue_of(broker: BrokerProcess, message_id: str) -> int:
    from rmq_spark.broker.transactions.ledger import transaction_rows

    [row] = [r for r in transaction_rows(broker.store_dir) if r.uniq_key == message_id]
    assert row.state == "pending"
    return row.queue_id
