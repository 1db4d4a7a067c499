"""Transactions across a real Apache RocketMQ 5.3.3 broker (name server + proxy with the broker
in-process, ``bench/peers/rocketmq_peer.py``) and ours, both ways on one store, with the
official Python client's transactional producer (one RocketMQ start: each costs a JVM's):

* Our broker writes two committed, one rolled-back and one pending transaction; RocketMQ,
  started on a copy of that store, delivers the committed ones once and never the rolled-back
  one, and its check-back asks a producer about the pending half only (RocketMQ reads our op
  markers as its own): the checker commits it, so it is delivered too (once per answer:
  RocketMQ asks again when an answer is not in by its next scan).
* RocketMQ then writes two committed transactions and a rolled-back one of its own into that
  store; read through our ``rocketmq`` source (read_committed) the store holds each committed
  message once (the checked one once per COMMIT answer) and nothing rolled back, and our
  ledger names each of RocketMQ's transactions' states as RocketMQ left them.

Every JVM runs inside the machine-wide bench lock."""

from __future__ import annotations

import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest
from broker_harness import REPO_ROOT, BrokerProcess, props, read_records, wait_for
from tx_helpers import HALF, bench_lock

from rmq_spark.broker.grpc.grpc_client import client_metadata
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.broker.transactions.ledger import transaction_rows
from rmq_spark.errors import RmqError

PEERS = REPO_ROOT / "bench" / "peers"
if str(PEERS) not in sys.path:
    sys.path.insert(0, str(PEERS))

pytestmark = [
    pytest.mark.bench_lock,
    pytest.mark.slow,
    pytest.mark.timeout(1800),  # the bench lock may be another suite's for minutes
    pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK"),
]

TOPIC = "TxInterop"
SEGMENT = 16 << 20  # tests/transactions' brokers' CommitLog segment; RocketMQ is told the same
WAIT_S = 120.0
COMMIT, ROLLBACK = 1, 2  # TransactionResolution
THEIRS = {b"c3": "committed", b"r3": "rolled_back", b"c4": "committed"}  # RocketMQ's own


def _retry_route(call: Callable[[], Any]) -> Any:
    """``call()``, retried while RocketMQ's name server has no route for the topic yet."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return call()
        except Exception as err:  # the client raises its own exception types
            if "route" not in str(err).lower() or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _their_states(store: Path) -> dict[bytes, str]:
    """Our ledger's state of each of RocketMQ's own transactions in ``store`` (also while
    RocketMQ writes it)."""
    bodies = {props(r)["UNIQ_KEY"]: r.body for r in read_records(store) if r.topic == HALF}
    states = {bodies.get(row.uniq_key): row.state for row in transaction_rows(store)}
    return {body: states.get(body, "absent") for body in THEIRS}


def _marked(store: Path) -> bool:
    try:
        return _their_states(store) == THEIRS
    except RmqError:  # a record RocketMQ is writing this moment
        return False


def _wait_route(endpoint: str) -> None:
    """Until RocketMQ at ``endpoint`` routes the topic: a producer started before that starts
    without a route, so it never opens the stream a check-back comes down (the client logs the
    failed route query and goes on)."""

    host, port = endpoint.rsplit(":", 1)
    endpoints = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])

    def queues() -> int:  # RocketMQ's proxy wants a client id and the endpoints asked
        with grpc.insecure_channel(endpoint) as channel:
            request = spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC), endpoints=endpoints)
            stub = spb_grpc.MessagingServiceStub(channel)
            metadata = client_metadata("tx-interop-route-probe")
            reply = stub.QueryRoute(request, timeout=10, metadata=metadata)
            return len(reply.message_queues)

    wait_for(queues, WAIT_S, f"{endpoint} to route {TOPIC}")


def _producer(rocketmq: ModuleType, endpoint: str, decide: Callable[[Any], int]) -> Any:
    config = rocketmq.ClientConfiguration(endpoint, rocketmq.Credentials(), request_timeout=10)

    class Checker(rocketmq.TransactionChecker):  # type: ignore[misc, name-defined]
        def check(self, message: Any) -> int:
            return decide(message)

    producer = rocketmq.Producer(config, (TOPIC,), checker=Checker())
    producer.startup()
    return producer


def _transactions(rocketmq: ModuleType, endpoint: str, bodies: tuple[str, ...]) -> None:
    """Half messages of ``bodies``: ``c*`` committed, ``r*`` rolled back, ``p*`` left open."""
    producer = _producer(rocketmq, endpoint, lambda message: 0)
    try:
        _send_transactions(rocketmq, producer, bodies)
    finally:
        producer.shutdown()


def _send_transactions(rocketmq: ModuleType, producer: Any, bodies: tuple[str, ...]) -> None:
    for body in bodies:
        transaction = producer.begin_transaction()
        message = rocketmq.Message()
        message.topic, message.body = TOPIC, body.encode()
        _retry_route(lambda: producer.send(message, transaction))  # noqa: B023
        if body.startswith("c"):
            transaction.commit()
        elif body.startswith("r"):
            transaction.rollback()


def _receive_all(rocketmq: ModuleType, endpoint: str, expected: int) -> list[str]:
    """What a new group receives until it has ``expected`` messages, then one more round."""
    config = rocketmq.ClientConfiguration(endpoint, rocketmq.Credentials(), request_timeout=10)
    subscription = {TOPIC: rocketmq.FilterExpression("*")}
    consumer = rocketmq.SimpleConsumer(config, "txInteropReaders", subscription, await_duration=3)
    consumer.startup()
    received: list[str] = []

    def one_round(deadline: float) -> None:
        try:
            batch = list(consumer.receive(32, 30) or [])
        except Exception as err:  # no route or no settings of the client yet: again
            text = str(err)
            if ('"settings" is null' not in text and "route" not in text.lower()) or (
                time.monotonic() > deadline
            ):
                raise
            time.sleep(0.5)
            return
        for message in batch:
            received.append(message.body.decode())
            consumer.ack(message)

    deadline = time.monotonic() + WAIT_S
    try:
        while len(received) < expected and time.monotonic() < deadline:
            one_round(deadline)
        one_round(deadline)  # nothing beyond the expected messages is waiting
    finally:
        consumer.shutdown()
    return received


def test_transactions_cross_a_real_rocketmq_broker_both_ways(
    rocketmq: ModuleType,
    tx_broker: Callable[..., BrokerProcess],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    from rocketmq_peer import RocketMQBroker

    ours, copy = tmp_path / "ours", tmp_path / "copy"
    broker = tx_broker("broker.transaction_check_interval_ms=3600000", store_dir=ours)
    _transactions(rocketmq, broker.address, ("c1", "r1", "c2", "p1"))
    assert broker.stop() == 0
    shutil.copytree(ours, copy)
    asked: list[str] = []

    def decide(message: Any) -> int:
        asked.append(bytes(message.body).decode())
        return COMMIT

    # RocketMQ checks (and counts a check) every 5 s from its start, also while no producer
    # is registered yet ("channel is null"); its default of 15 checks could run out before
    # the checker's registration on a slow machine, and p1 would be discarded unasked.
    properties = {
        "mappedFileSizeCommitLog": SEGMENT,
        "transactionCheckInterval": 5000,
        "transactionCheckMax": 100,
    }
    with bench_lock():
        with RocketMQBroker(
            store_dir=copy, heap="384m", namesrv_heap="128m", broker_properties=properties
        ) as peer:
            _wait_route(peer.endpoint)
            checker = _producer(rocketmq, peer.endpoint, decide)
            try:
                received = _receive_all(rocketmq, peer.endpoint, 3)
                _send_transactions(rocketmq, checker, ("c3", "r3", "c4"))  # RocketMQ's own
                # RocketMQ 5 writes op markers in batches (every transactionOpBatchInterval):
                # stopped at once it would leave r3 pending, without its rollback's marker
                wait_for(lambda: _marked(copy), WAIT_S, "RocketMQ's op markers")
            finally:
                checker.shutdown()
        spark = request.getfixturevalue("spark")
        rows = spark.read.format("rocketmq").load(str(copy)).where(f"topic = '{TOPIC}'").collect()
    assert set(asked) == {"p1"}  # RocketMQ took c1, r1 and c2 as resolved by our op markers
    seen = Counter(received)
    assert seen.pop("c1") == seen.pop("c2") == 1 and "r1" not in seen, received
    # RocketMQ's check is at least once: a half whose answer is not in by its next scan is
    # asked about again, and each COMMIT answer stores a copy
    assert 1 <= seen.pop("p1") <= len(asked) and not seen, (received, asked)
    read = Counter(bytes(r.body).decode() for r in rows)
    assert 1 <= read.pop("p1") <= len(asked), (read, asked)  # a copy per COMMIT answer
    assert read == {"c1": 1, "c2": 1, "c3": 1, "c4": 1}, read
    assert _their_states(copy) == THEIRS
