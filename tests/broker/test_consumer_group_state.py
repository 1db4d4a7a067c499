"""Group state exists only for groups that received: a handle naming any other group creates
nothing (a caller with a wildcard grant cannot grow the broker's memory with made-up names)."""

from __future__ import annotations

from pathlib import Path

from rmq_spark.broker.consumer.receipt import ReceiptHandle
from rmq_spark.broker.embedded import Broker


def test_acks_and_questions_naming_unknown_groups_create_no_group_state(tmp_path: Path) -> None:
    with Broker(tmp_path / "store") as broker:
        groups = broker.consume.groups
        handle = ReceiptHandle("broker-a", 0, 0, 0, 0, 10_000, 1, groups.nonce)
        for i in range(200):
            group = f"made-up-{i}"
            assert groups.ack(group, "orders", handle).name == "INVALID"
            assert groups.change_invisible(group, "orders", handle, 0).name == "INVALID"
            assert not groups.is_current(group, "orders", handle)
            assert groups.delivered_offset(group, "orders", handle) is None
            assert groups.committed_offset(group, "orders", 0) is None
            assert groups.next_deadline_ms(group, "orders") is None
        assert groups.positions() == {} and groups.snapshot() == ({}, {})
        assert len(groups._all()) == 0
