"""kill -9 of a live broker process between a commit's committed copy and its op marker.

A client thread commits and rolls back transactions as fast as it can (raw gRPC SendMessage
TRANSACTION + EndTransaction). The test stops the broker (SIGSTOP) at random moments and reads
its CommitLog as the OS holds it; once a committed copy is there whose half has no op marker
(what a kill -9 leaves durable), it kills the broker (SIGKILL), else lets it go on (SIGCONT).
Three such kills on one store; then a broker restarted with a fast check-back asks the
official producer's checker, which commits every ``c-`` half and rolls back every ``r-`` one.
After that nothing is pending, every ``c-`` message is in its topic exactly once (the ones
cut at the seam too: the check's commit stores nothing new) and no ``r-`` one is, and a
consumer receives each committed message once."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from broker_harness import BrokerProcess, read_records, wait_for
from tx_helpers import HALF, OP, received_bodies

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.broker.transactions.ledger import pending_counts
from rmq_spark.broker.transactions.records import op_offsets

TOPIC = "orders"
METADATA = (("x-mq-client-id", "seam-test-client"),)
IDLE = "broker.transaction_check_interval_ms=3600000"  # no check-back while the test cuts
FAST = ("broker.transaction_timeout_ms=300", "broker.transaction_check_interval_ms=200")


def _transact(stub: Any, body: str) -> None:
    message = pb.Message(body=body.encode())
    message.topic.name = TOPIC
    message.system_properties.message_id = uuid.uuid4().hex.upper()
    message.system_properties.body_encoding = pb.IDENTITY
    message.system_properties.message_type = pb.TRANSACTION
    sent = stub.SendMessage(spb.SendMessageRequest(messages=[message]), metadata=METADATA)
    entry = sent.entries[0]
    request = spb.EndTransactionRequest(
        message_id=entry.message_id,
        transaction_id=entry.transaction_id,
        resolution=pb.COMMIT if body.startswith("c-") else pb.ROLLBACK,
    )
    request.topic.name = TOPIC
    stub.EndTransaction(request, metadata=METADATA, timeout=30)


def _send_until_dead(address: str, first: int) -> threading.Thread:
    def run() -> None:
        with grpc.insecure_channel(address) as channel:
            stub = spb_grpc.MessagingServiceStub(channel)
            for i in range(first, first + 100_000):
                try:
                    _transact(stub, f"{'c' if i % 2 == 0 else 'r'}-{i}")
                except grpc.RpcError:
                    return  # the broker was killed

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _cut_at_the_seam(store_dir: Path, earlier: list[str]) -> str | None:
    """The body of a committed copy whose half has no op marker, if the CommitLog holds one
    other than the ``earlier`` cuts."""
    records = read_records(store_dir)
    halves = {r.physical_offset: r for r in records if r.topic == HALF}
    marked = {offset for r in records if r.topic == OP for offset in op_offsets(r.body)}
    for record in records:
        half = halves.get(record.prepared_transaction_offset)
        if record.topic == TOPIC and half is not None and half.queue_offset not in marked:
            if record.body.decode() not in earlier:
                return record.body.decode()
    return None


def _kill_at_the_seam(broker: BrokerProcess, earlier: list[str]) -> str:
    pid = broker.proc.pid
    for _ in range(2000):
        time.sleep(random.uniform(0, 0.02))
        os.kill(pid, signal.SIGSTOP)
        cut = _cut_at_the_seam(broker.store_dir, earlier)
        if cut is not None:
            broker.kill()  # SIGKILL while stopped: the process never runs again
            return cut
        os.kill(pid, signal.SIGCONT)
    raise AssertionError("never stopped the broker between a commit and its op marker")


def test_kill_9_between_commit_and_op_marker_delivers_once(
    tx_broker: Callable[..., BrokerProcess], tx_clients: Callable[..., Any], tmp_path: Path
) -> None:
    store_dir = tmp_path / "store"
    cuts = []
    for round_ in range(3):
        broker = tx_broker(IDLE, store_dir=store_dir)
        sender = _send_until_dead(broker.address, round_ * 100_000)
        wait_for(lambda: any(r.topic == TOPIC for r in read_records(store_dir)), 30, "a commit")
        cuts.append(_kill_at_the_seam(broker, cuts))
        sender.join(60)
    broker = tx_broker(*FAST, "broker.transaction_check_max=50", store_dir=store_dir)
    commit, rollback = 1, 2  # TransactionResolution
    decide = lambda m: commit if bytes(m.body).startswith(b"c-") else rollback  # noqa: E731
    tx_clients("producer", broker.address, (TOPIC,), decide)
    wait_for(lambda: not pending_counts(store_dir), 120, "every half to be resolved")
    records = read_records(store_dir)
    halves = {r.body.decode() for r in records if r.topic == HALF}
    stored = Counter(r.body.decode() for r in records if r.topic == TOPIC)
    assert len(set(cuts)) == 3 and set(cuts) <= set(stored), cuts
    assert set(stored) == {body for body in halves if body.startswith("c-")}
    assert set(stored.values()) == {1}, [b for b, n in stored.items() if n > 1]
    consumer = tx_clients("simple", broker.address, "seam-readers", (TOPIC,))
    seen: list[bytes] = []
    wait_for(lambda: seen.extend(received_bodies(consumer, 1)) or len(seen) >= len(stored), 120,
             "every committed message")  # fmt: skip
    seen += received_bodies(consumer, 1)
    assert Counter(b.decode() for b in seen) == stored
