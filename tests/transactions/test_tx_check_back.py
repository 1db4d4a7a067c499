"""The check-back: a producer "crashes" (stops) before EndTransaction; the broker asks another
producer of the topic over its Telemetry stream, whose checker commits one half, rolls back
another and cannot tell for a third, which is discarded after ``transaction_check_max``
checks (copied to TRANS_CHECK_MAX_TIME_TOPIC and logged). Consumers see the committed one
once. A broker killed (-9) between prepare and commit delivers it once after the restart."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from broker_harness import BrokerProcess, props, wait_for
from tx_helpers import HALF, OP, end_call, received_bodies, records_of, send_half

from rmq_spark.broker.proto import definition_pb2 as pb

FAST = ("broker.transaction_timeout_ms=300", "broker.transaction_check_interval_ms=200")
MAX_2 = "broker.transaction_check_max=2"
MAX_50 = "broker.transaction_check_max=50"  # checks before a producer connects do not discard
DISCARD = "TRANS_CHECK_MAX_TIME_TOPIC"


def _decide(rocketmq: ModuleType) -> Callable[[Any], Any]:
    resolution = rocketmq.TransactionResolution
    answers = {b"commit me": resolution.COMMIT, b"roll me back": resolution.ROLLBACK}
    return lambda message: answers.get(bytes(message.body), 0)


def test_the_check_back_commits_rolls_back_and_discards(
    tx_broker: Callable[..., BrokerProcess], tx_clients: Callable[..., Any], rocketmq: ModuleType
) -> None:
    broker = tx_broker(*FAST, MAX_2)
    tx_clients("producer", broker.address, ("orders",), _decide(rocketmq))  # the survivor
    crashing = tx_clients("producer", broker.address, ("orders",), lambda m: 0)
    for body in (b"commit me", b"roll me back", b"nobody knows"):
        send_half(rocketmq, crashing, "orders", body)
    crashing.shutdown()  # before any EndTransaction

    def discarded() -> list[Any]:
        return records_of(broker.store_dir, DISCARD)

    [lost] = wait_for(discarded, 60, "the undecided half to be discarded")
    assert lost.body == b"nobody knows"
    assert props(lost)["TRANSACTION_CHECK_TIMES"] == "2"
    assert props(lost)["REAL_TOPIC"] == "orders"
    wait_for(lambda: "discarded after 2 checks" in broker.log_text(), 30, "the discard's log")
    consumer = tx_clients("simple", broker.address, "billing", ("orders",))
    seen = wait_for(lambda: received_bodies(consumer, rounds=1), 30, "the committed half")
    seen += received_bodies(consumer, rounds=2)
    assert seen == [b"commit me"]
    [real] = records_of(broker.store_dir, "orders")
    assert real.sys_flag & 0xC == 0x8
    halves = {h.physical_offset: h for h in records_of(broker.store_dir, HALF)}
    assert halves[real.prepared_transaction_offset].body == b"commit me"
    assert len(records_of(broker.store_dir, OP)) == 2  # commit and rollback


def test_a_broker_killed_between_prepare_and_commit_delivers_once(
    tx_broker: Callable[..., BrokerProcess], tx_clients: Callable[..., Any], rocketmq: ModuleType
) -> None:
    broker = tx_broker("broker.transaction_check_interval_ms=3600000")
    producer = tx_clients("producer", broker.address, ("orders",), lambda m: 0)
    _, kept = send_half(rocketmq, producer, "orders", b"kept")
    _, dropped = send_half(rocketmq, producer, "orders", b"dropped")
    _, checked = send_half(rocketmq, producer, "orders", b"commit me")
    producer.shutdown()
    broker.kill()
    broker = tx_broker(*FAST, MAX_50, store_dir=broker.store_dir)
    for receipt, resolution in ((kept, pb.COMMIT), (dropped, pb.ROLLBACK)):
        end = end_call(
            broker.address, "orders", receipt.message_id, receipt.transaction_id, resolution
        )
        assert end.code == pb.OK
    tx_clients("producer", broker.address, ("orders",), _decide(rocketmq))

    def committed() -> list[bytes]:
        return sorted(r.body for r in records_of(broker.store_dir, "orders"))

    wait_for(lambda: committed() == [b"commit me", b"kept"], 60, "the check-back's commit")
    broker.kill()  # and again: nothing is committed twice after a restart
    broker = tx_broker(*FAST, MAX_50, store_dir=broker.store_dir)
    tx_clients("producer", broker.address, ("orders",), _decide(rocketmq))
    consumer = tx_clients("simple", broker.address, "billing", ("orders",))
    seen = wait_for(lambda: received_bodies(consumer, rounds=1), 30, "the committed halves")
    seen += received_bodies(consumer, rounds=3)
    assert sorted(seen) == [b"commit me", b"kept"]
    assert committed() == [b"commit me", b"kept"]
    assert records_of(broker.store_dir, DISCARD) == []
    assert checked.transaction_id
