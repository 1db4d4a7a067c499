"""A broker that died between a commit's copy and its op marker (the store as it left it: a
half and its committed copy, no op marker) still delivers the message once after the
restart: the producer's retried commit and the check-back's commit store nothing new."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker_harness import BrokerProcess, wait_for
from tx_helpers import OP, end_call, records_of

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.transactions.records import HalfRef, commit_request, transaction_id
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.layout import RMQ_SYS_TRANS_HALF_TOPIC
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest


def _crashed_store(root: Path) -> tuple[str, str]:
    """A store holding two halves and their committed copies but no op marker."""
    ids = []
    with MessageStore.open(StoreConfig(root_dir=root, segment_size_bytes=1 << 24)) as store:
        for uniq, body in (("TXRETRY", b"retried"), ("TXCHECK", b"checked")):
            props = {
                "UNIQ_KEY": uniq,
                "TRAN_MSG": "true",
                "PGROUP": "orders",
                "REAL_TOPIC": "orders",
                "REAL_QID": "0",
                "__transactionId__": uniq,
            }
            half = store.put(PutRequest(RMQ_SYS_TRANS_HALF_TOPIC, body, properties=props))
            assert store.put(commit_request(store.read(half.physical_offset))).ok
            ids.append(transaction_id(HalfRef(half.physical_offset, half.queue_offset)))
    return ids[0], ids[1]


def test_a_commit_retried_after_a_crash_before_the_op_marker_is_stored_once(
    tx_broker: Callable[..., BrokerProcess], tx_clients: Callable[..., Any], tmp_path: Path
) -> None:
    retried, _ = _crashed_store(tmp_path / "store")
    broker = tx_broker(
        "broker.transaction_timeout_ms=1",
        "broker.transaction_check_interval_ms=200",
        store_dir=tmp_path / "store",
    )
    assert end_call(broker.address, "orders", "TXRETRY", retried, pb.COMMIT).code == pb.OK
    commit = 1  # TransactionResolution.COMMIT: the check-back commits the other one again
    tx_clients("producer", broker.address, ("orders",), lambda message: commit)
    wait_for(lambda: len(records_of(broker.store_dir, OP)) == 2, 60, "both op markers")
    assert sorted(r.body for r in records_of(broker.store_dir, "orders")) == [
        b"checked",
        b"retried",
    ]
