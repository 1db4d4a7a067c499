"""The thin ``Producer``'s transactions with auth on: a signed producer with Pub on the topic
sends, commits and answers checks; a user without Pub there cannot send a half, and its
checker is never asked about the topic's halves, even under the same transaction group."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from broker_harness import BrokerProcess, wait_for
from tx_helpers import OP, records_of

from rmq_spark.broker.producer import Producer
from rmq_spark.broker.producer_tx import CheckedMessage
from rmq_spark.errors import SendRejectedError

USERS = """
[users.alice]
secret_key = "alice-secret-1"
policies = [{ resource = "Topic:orders", actions = ["Pub", "Sub"] }]

[users.mallory]
secret_key = "mallory-secret-1"
policies = [{ resource = "Topic:misc", actions = ["Pub"] }]
"""
ALICE = ("alice", "alice-secret-1")
MALLORY = ("mallory", "mallory-secret-1")


def test_only_a_publisher_of_the_topic_sends_and_is_asked(
    tx_broker: Callable[..., BrokerProcess], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    broker = tx_broker(
        "broker.auth_enabled=true",
        f"broker.auth_users_file={users}",
        "broker.transaction_timeout_ms=300",
        "broker.transaction_check_interval_ms=200",
        "broker.transaction_check_max=50",
    )

    def producer(creds: tuple[str, str], checker: Callable[[CheckedMessage], object]) -> Producer:
        return Producer(
            broker.address,
            credentials=creds,
            checker=checker,
            transaction_topics=["orders"],
            transaction_group="shop",
        )

    mallory_asked: list[CheckedMessage] = []
    with producer(MALLORY, lambda m: mallory_asked.append(m) or "rollback") as mallory:
        with pytest.raises(SendRejectedError):
            mallory.send_in_transaction("orders", b"forged")
        with producer(ALICE, lambda m: "unknown") as alice:
            done = alice.send_in_transaction("orders", b"done")
            done.commit()
            alice.send_in_transaction("orders", b"left")  # then alice "crashes"
        with producer(ALICE, lambda m: "commit"):  # alice restarted
            wait_for(lambda: len(records_of(broker.store_dir, OP)) == 2, 60, "the check")
    assert sorted(r.body for r in records_of(broker.store_dir, "orders")) == [b"done", b"left"]
    assert mallory_asked == []
    refused = [r.getMessage() for r in caplog.records if "refused by" in r.getMessage()]
    assert refused and refused[0].startswith("transaction checks of orders refused by")
