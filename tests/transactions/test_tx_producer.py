"""The thin ``Producer``'s transactions against a real broker process: commit, rollback, a
checker deciding halves whose producer "crashed" before ending them, and the limits (only
declared topics, one end per handle)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from broker_harness import BrokerProcess, props, wait_for
from tx_helpers import HALF, OP, records_of

from rmq_spark.broker.producer import Producer
from rmq_spark.broker.producer_tx import (
    TX_GROUP_PROPERTY,
    CheckedMessage,
    CheckStreams,
    Resolution,
    TransactionEndedError,
)
from rmq_spark.broker.proto import service_pb2 as spb

FAST = ("broker.transaction_timeout_ms=300", "broker.transaction_check_interval_ms=200")


@pytest.fixture
def producers() -> Iterator[Callable[..., Producer]]:
    made: list[Producer] = []

    def make(
        address: str,
        checker: Callable[[CheckedMessage], object],
        *topics: str,
        group: str | None = None,
    ) -> Producer:
        producer = Producer(
            address, checker=checker, transaction_topics=topics, transaction_group=group
        )
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.close()


def test_commit_stores_the_message_once_and_rollback_stores_none(
    tx_broker: Callable[..., BrokerProcess], producers: Callable[..., Producer]
) -> None:
    broker = tx_broker("broker.transaction_check_interval_ms=3600000")
    producer = producers(broker.address, lambda m: "unknown", "orders")
    kept = producer.send_in_transaction("orders", b"kept", tag="t", keys=["k1"])
    dropped = producer.send_in_transaction("orders", b"dropped")
    assert len(kept.transaction_id) == 32
    assert records_of(broker.store_dir, "orders") == []
    kept.commit()
    dropped.rollback()
    with pytest.raises(TransactionEndedError, match="already ended"):
        kept.rollback()
    assert kept.ended is Resolution.COMMIT
    [real] = records_of(broker.store_dir, "orders")
    assert real.body == b"kept" and real.sys_flag & 0xC == 0x8
    assert props(real)["UNIQ_KEY"] == kept.message_id
    assert len(records_of(broker.store_dir, HALF)) == 2
    assert len(records_of(broker.store_dir, OP)) == 2


def test_the_checker_decides_halves_a_crashed_producer_left(
    tx_broker: Callable[..., BrokerProcess], producers: Callable[..., Producer]
) -> None:
    broker = tx_broker(*FAST, "broker.transaction_check_max=50")
    crashed = producers(broker.address, lambda m: "unknown", "orders", group="billing")
    for body in (b"commit me", b"roll me back"):
        crashed.send_in_transaction("orders", body)
    crashed.close()  # before any commit or rollback
    asked: list[CheckedMessage] = []

    def decide(message: CheckedMessage) -> Resolution:
        asked.append(message)
        return Resolution.COMMIT if message.body == b"commit me" else Resolution.ROLLBACK

    producers(broker.address, decide, "orders", group="billing")  # its restart

    def committed() -> list[bytes]:
        return [r.body for r in records_of(broker.store_dir, "orders")]

    wait_for(lambda: len(records_of(broker.store_dir, OP)) == 2, 60, "both halves decided")
    assert committed() == [b"commit me"]
    assert {m.topic for m in asked} == {"orders"}
    assert all(len(m.transaction_id) == 32 for m in asked)
    assert {m.properties[TX_GROUP_PROPERTY] for m in asked} == {"billing"}


def test_a_checker_does_not_answer_for_another_producers_halves(
    tx_broker: Callable[..., BrokerProcess], producers: Callable[..., Producer]
) -> None:
    broker = tx_broker(*FAST, "broker.transaction_check_max=3")
    sender = producers(broker.address, lambda m: "unknown", "orders")  # its own client id
    sender.send_in_transaction("orders", b"not yours")
    sender.close()
    asked: list[CheckedMessage] = []
    producers(broker.address, lambda m: asked.append(m) or "rollback", "orders")
    producers(broker.address, lambda m: asked.append(m) or "rollback", "orders", group="x")
    wait_for(lambda: records_of(broker.store_dir, "TRANS_CHECK_MAX_TIME_TOPIC"), 60, "the discard")
    assert asked == [] and records_of(broker.store_dir, OP) == []


def test_a_checker_is_not_asked_about_another_topics_halves(
    tx_broker: Callable[..., BrokerProcess], producers: Callable[..., Producer]
) -> None:
    broker = tx_broker(*FAST, "broker.transaction_check_max=3")
    sender = producers(broker.address, lambda m: "unknown", "orders")
    sender.send_in_transaction("orders", b"not yours")
    sender.close()
    asked: list[CheckedMessage] = []
    other = producers(broker.address, lambda m: asked.append(m) or "commit", "payments")
    with pytest.raises(ValueError, match="transaction_topics"):
        other.send_in_transaction("orders", b"undeclared")
    wait_for(lambda: records_of(broker.store_dir, "TRANS_CHECK_MAX_TIME_TOPIC"), 60, "the discard")
    assert asked == [] and records_of(broker.store_dir, "orders") == []


def test_a_check_command_of_an_undeclared_topic_is_ignored() -> None:
    asked: list[CheckedMessage] = []
    streams = CheckStreams(
        topics=("payments",),
        group="g",
        namespace="",
        checker=asked.append,
        metadata=tuple,
        timeout_s=1,
    )
    command = spb.RecoverOrphanedTransactionCommand(transaction_id="0" * 32)
    command.message.topic.name = "orders"
    streams._answer(None, command)  # a broker naming a topic the producer never declared
    assert asked == [] and streams.answered == 0


def test_bad_use_gets_a_clear_error() -> None:
    with pytest.raises(ValueError, match="at least one topic"):
        Producer("127.0.0.1:1", checker=lambda m: "commit")
    with Producer("127.0.0.1:1") as plain, pytest.raises(ValueError, match="needs a checker"):
        plain.send_in_transaction("orders", b"x")
