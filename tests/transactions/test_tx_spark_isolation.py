"""The ``rocketmq`` source's ``isolation``: by default (read_committed) a store with committed,
rolled-back, pending and discarded transactions reads as its committed messages once (the
COMMIT records), never a half or op record; read_uncommitted shows the halves; the
``transactions`` view says each transaction's state and check count, as the broker's ledger
(``rmq-spark transactions``) does: one precedence, a committed copy first (also when its op
marker was never written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_spark.broker.transactions.ledger import transaction_rows
from rmq_spark.broker.transactions.records import (
    commit_request,
    discard_request,
    op_request,
    renew_request,
)
from rmq_spark.errors import SourceError
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.transactions_view import transactions_frame
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.layout import RMQ_SYS_TRANS_HALF_TOPIC
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

pytestmark = pytest.mark.spark


def _half(store: MessageStore, body: bytes, uniq: str) -> int:
    props = {"UNIQ_KEY": uniq, "TRAN_MSG": "true", "PGROUP": "orders", "REAL_TOPIC": "orders",
             "REAL_QID": "0", "__transactionId__": uniq}  # fmt: skip
    result = store.put(PutRequest(RMQ_SYS_TRANS_HALF_TOPIC, body, properties=props))
    assert result.ok
    return result.physical_offset


def _write_store(root: Path) -> None:
    with MessageStore.open(StoreConfig(root_dir=root, segment_size_bytes=1 << 20)) as store:
        store.put(PutRequest("orders", b"plain", tags="t"))
        committed = store.read(_half(store, b"committed", "U1"))
        rolled = store.read(_half(store, b"rolled back", "U2"))
        _half(store, b"pending", "U3")
        lost = store.read(_half(store, b"discarded", "U4"))
        assert store.put(commit_request(committed)).ok
        for half in (committed, rolled):
            assert store.put(op_request(half.queue_offset, half.store_host)).ok
        renewed = store.put(renew_request(lost, 1))
        assert store.put(discard_request(store.read(renewed.physical_offset))).ok
        cut = store.read(_half(store, b"cut before its op", "U5"))
        assert store.put(commit_request(cut)).ok  # the broker stopped before the op marker


def test_read_committed_is_the_default_and_the_view_has_every_state(spark, tmp_path: Path) -> None:
    root = tmp_path / "store"
    _write_store(root)
    path = str(root)
    rows = spark.read.format("rocketmq").load(path).select("topic", "body", "sys_flag").collect()
    assert sorted((r.topic, bytes(r.body), r.sys_flag & 0xC) for r in rows) == [
        ("orders", b"committed", 0x8),
        ("orders", b"cut before its op", 0x8),
        ("orders", b"plain", 0),
    ]
    raw = spark.read.format("rocketmq").option("isolation", "read_uncommitted").load(path)
    halves = raw.where(f"topic = '{RMQ_SYS_TRANS_HALF_TOPIC}'").select("body").collect()
    assert len(halves) == 6  # five halves and one check re-put
    view = {r.uniq_key: r for r in transactions_frame(spark, path).collect()}
    assert {k: (r.state, r.check_count) for k, r in view.items()} == {
        "U1": ("committed", 0),
        "U2": ("rolled_back", 0),
        "U3": ("pending", 0),
        "U4": ("discarded", 1),
        "U5": ("committed", 0),
    }
    assert view["U1"].commit_offset is not None
    ledger = {row.uniq_key: (row.state, row.commit_offset) for row in transaction_rows(root)}
    assert ledger == {k: (r.state, r.commit_offset or -1) for k, r in view.items()}


def test_a_bad_isolation_value_is_one_line() -> None:
    with pytest.raises(SourceError, match="isolation"):
        parse_options({"path": "/s", "isolation": "serializable"}, streaming=False)
