"""Who may end a transaction: EndTransaction needs Pub on the request's topic, and the half
must be of that topic, so a caller without rights is refused and one with a wildcard grant
on other topics cannot end (or even find) a transaction of a topic it may not send to."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from broker_harness import BrokerProcess
from tx_helpers import OP, end_call, records_of, send_half

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.security.auth import signature_metadata

USERS = """
[users.alice]
secret_key = "alice-secret-1"
policies = [{ resource = "Topic:orders", actions = ["Pub", "Sub"] }]

[users.bob]
secret_key = "bob-secret-1"
policies = [{ resource = "Topic:misc", actions = ["Pub"] }]

[users.carol]
secret_key = "carol-secret-1"
policies = [
  { resource = "Topic:*", actions = ["Sub"] },
  { resource = "Topic:pay*", actions = ["Pub"] },
]
"""
ALICE = ("alice", "alice-secret-1")


def _signed(user: str) -> Any:
    now_ms = int(time.time() * 1000)
    return (("x-mq-client-id", f"{user}-client"),) + signature_metadata(
        user, f"{user}-secret-1", now_ms
    )


def test_only_a_publisher_of_the_topic_ends_its_transaction(
    tx_broker: Callable[..., BrokerProcess],
    tx_clients: Callable[..., Any],
    rocketmq: ModuleType,
    tmp_path: Path,
) -> None:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    broker = tx_broker(
        "broker.auth_enabled=true",
        f"broker.auth_users_file={users}",
        "broker.transaction_check_interval_ms=3600000",
    )
    producer = tx_clients(
        "producer", broker.address, ("orders",), lambda m: None, credentials=ALICE
    )
    transaction, receipt = send_half(rocketmq, producer, "orders", b"paid")
    mid, tid = receipt.message_id, receipt.transaction_id

    bob = end_call(broker.address, "orders", mid, tid, pb.COMMIT, _signed("bob"))
    assert bob.code == pb.UNAUTHORIZED
    # carol may publish to pay*: naming her own topic does not reach alice's transaction.
    carol = end_call(broker.address, "payments", mid, tid, pb.COMMIT, _signed("carol"))
    assert carol.code == pb.INTERNAL_SERVER_ERROR
    carol = end_call(broker.address, "orders", mid, tid, pb.ROLLBACK, _signed("carol"))
    assert carol.code == pb.UNAUTHORIZED
    assert records_of(broker.store_dir, "orders") == []
    assert records_of(broker.store_dir, "payments") == []
    assert records_of(broker.store_dir, OP) == []

    transaction.commit()
    assert [r.body for r in records_of(broker.store_dir, "orders")] == [b"paid"]
