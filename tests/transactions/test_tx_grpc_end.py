"""Transactional messages over gRPC with the official Python client: a half message is stored
as RocketMQ stores it (STORE_FORMAT.md 10), commit writes the real message and an op marker,
rollback only the marker, consumers see committed messages once and nothing else, and a
duplicate, unknown or blank EndTransaction answers as the Java proxy does."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from broker_harness import BrokerProcess, wait_for
from tx_helpers import HALF, OP, end_call, props, received_bodies, records_of, send_half

from rmq_spark.broker.proto import definition_pb2 as pb

NO_CHECK = "broker.transaction_check_interval_ms=3600000"


def test_commit_and_rollback_reach_consumers_once(
    tx_broker: Callable[..., BrokerProcess], tx_clients: Callable[..., Any], rocketmq: ModuleType
) -> None:
    broker = tx_broker(NO_CHECK)
    producer = tx_clients("producer", broker.address, ("orders",), lambda m: None)
    committed, commit_receipt = send_half(rocketmq, producer, "orders", b"committed")
    rolled, _ = send_half(rocketmq, producer, "orders", b"rolled back")
    send_half(rocketmq, producer, "orders", b"pending")
    assert commit_receipt.transaction_id
    committed.commit()
    rolled.rollback()
    consumer = tx_clients("simple", broker.address, "billing", ("orders",))

    seen: list[bytes] = []

    def got_commit() -> bool:
        seen.extend(received_bodies(consumer, rounds=1))
        return b"committed" in seen

    wait_for(got_commit, 60, "the committed message")
    seen.extend(received_bodies(consumer, rounds=2))
    assert seen == [b"committed"]

    halves = records_of(broker.store_dir, HALF)
    assert [h.body for h in halves] == [b"committed", b"rolled back", b"pending"]
    for half in halves:
        p = props(half)
        assert (p["REAL_TOPIC"], p["TRAN_MSG"], p["PGROUP"]) == ("orders", "true", "orders")
        assert p["__transactionId__"] == p["UNIQ_KEY"]
        assert half.sys_flag & 0xC == 0 and half.queue_id == 0
    [real] = records_of(broker.store_dir, "orders")
    assert real.sys_flag & 0xC == 0x8
    assert real.prepared_transaction_offset == halves[0].physical_offset
    assert real.queue_id == int(props(halves[0])["REAL_QID"])
    assert props(real)["UNIQ_KEY"] == commit_receipt.message_id
    ops = records_of(broker.store_dir, OP)
    assert sorted(op.body for op in ops) == [b"0", b"1"]
    assert all(props(op) == {"TAGS": "d", "WAIT": "true"} for op in ops)


def test_duplicate_unknown_and_blank_end_transaction(
    tx_broker: Callable[..., BrokerProcess], tx_clients: Callable[..., Any], rocketmq: ModuleType
) -> None:
    broker = tx_broker(NO_CHECK)
    producer = tx_clients("producer", broker.address, ("orders",), lambda m: None)
    transaction, receipt = send_half(rocketmq, producer, "orders", b"once")
    transaction.commit()
    mid, tid = receipt.message_id, receipt.transaction_id
    for resolution in (pb.COMMIT, pb.ROLLBACK, pb.COMMIT):  # late and repeated: nothing new
        assert end_call(broker.address, "orders", mid, tid, resolution).code == pb.OK
    assert len(records_of(broker.store_dir, "orders")) == 1
    assert len(records_of(broker.store_dir, OP)) == 1

    unknown = end_call(broker.address, "orders", mid, "00000000000000FF0000000000000007", 1)
    assert unknown.code == pb.INTERNAL_SERVER_ERROR
    assert "cannot found transaction data" in unknown.message
    assert end_call(broker.address, "orders", mid, "not an id", 1).code == pb.INTERNAL_SERVER_ERROR
    assert end_call(broker.address, "orders", mid, " ", 1).code == pb.INVALID_TRANSACTION_ID
    # Another topic's name with this id: not a transaction of that topic.
    other = end_call(broker.address, "payments", mid, tid, pb.COMMIT)
    assert other.code == pb.INTERNAL_SERVER_ERROR
    assert len(records_of(broker.store_dir, "orders")) == 1


def test_a_push_consumer_gets_committed_messages_once(
    tx_broker: Callable[..., BrokerProcess], tx_clients: Callable[..., Any], rocketmq: ModuleType
) -> None:
    broker = tx_broker(NO_CHECK)
    got: list[bytes] = []
    lock = threading.Lock()

    class Listener(rocketmq.MessageListener):  # type: ignore[misc, name-defined]
        def consume(self, message: Any) -> Any:
            with lock:
                got.append(bytes(message.body))
            return rocketmq.ConsumeResult.SUCCESS

    config = rocketmq.ClientConfiguration(
        broker.address, rocketmq.Credentials(), request_timeout=10
    )
    subscription = {"orders": rocketmq.FilterExpression("*")}
    consumer = rocketmq.PushConsumer(config, "pushers", Listener(), subscription)
    consumer.startup()
    try:
        producer = tx_clients("producer", broker.address, ("orders",), lambda m: None)
        for body, end in ((b"one", "commit"), (b"two", "rollback"), (b"three", None)):
            transaction, _ = send_half(rocketmq, producer, "orders", body)
            if end is not None:
                getattr(transaction, end)()
        last, _ = send_half(rocketmq, producer, "orders", b"last")
        last.commit()  # committed after the others were resolved (or left pending)

        def both() -> bool:
            with lock:
                return b"one" in got and b"last" in got

        wait_for(both, 60, "the committed messages")
        with lock:
            assert sorted(got) == [b"last", b"one"]
    finally:
        consumer.shutdown()
