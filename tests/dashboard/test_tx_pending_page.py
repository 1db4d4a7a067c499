"""The dashboard's pending-transactions page (``/transactions``) through Flask's test client,
over a store holding pending, re-checked, committed and rolled-back transactions of two
topics and producer groups: one row per (topic, producer group) with the pending count, the
oldest one's born time and age and the most-asked one's check count; a store without
transactions says so."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from rmq_spark.broker.transactions.ledger import pending_by_group
from rmq_spark.broker.transactions.records import commit_request, op_request, renew_request
from rmq_spark.cli.dashboard.app import DashboardSettings, create_app
from rmq_spark.cli.dashboard.transactions_page import age_text
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.layout import RMQ_SYS_TRANS_HALF_TOPIC
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

MINUTE_MS = 60_000


def _half(store: MessageStore, topic: str, group: str, uniq: str, born_ms: int) -> int:
    props = {"UNIQ_KEY": uniq, "TRAN_MSG": "true", "PGROUP": group, "REAL_TOPIC": topic,
             "REAL_QID": "0", "__transactionId__": uniq}  # fmt: skip
    request = PutRequest(RMQ_SYS_TRANS_HALF_TOPIC, uniq.encode(), properties=props,
                         born_timestamp_ms=born_ms)  # fmt: skip
    result = store.put(request)
    assert result.ok
    return result.physical_offset


def _write(root: Path, now_ms: int) -> None:
    with MessageStore.open(StoreConfig(root_dir=root, segment_size_bytes=1 << 20)) as store:
        store.put(PutRequest("orders", b"plain"))
        _half(store, "orders", "orders", "old", now_ms - 10 * MINUTE_MS)
        checked = store.read(_half(store, "orders", "orders", "checked", now_ms - MINUTE_MS))
        assert store.put(renew_request(checked, 1)).ok
        renewed = store.put(renew_request(checked, 2))
        assert renewed.ok
        done = store.read(_half(store, "orders", "orders", "done", now_ms - 60 * MINUTE_MS))
        undone = store.read(_half(store, "orders", "orders", "undone", now_ms - 60 * MINUTE_MS))
        assert store.put(commit_request(done)).ok
        for half in (done, undone):
            assert store.put(op_request(half.queue_offset, half.store_host)).ok
        _half(store, "payments", "pg-pay", "pay", now_ms - 120 * MINUTE_MS)


def test_the_page_shows_pending_transactions_per_topic_and_producer_group(
    tmp_path: Path,
) -> None:
    now_ms = int(time.time() * 1000)
    _write(tmp_path / "store", now_ms)
    groups = pending_by_group(tmp_path / "store")
    assert [(g.topic, g.producer_group, g.count, g.max_check_count) for g in groups] == [
        ("orders", "orders", 2, 2),
        ("payments", "pg-pay", 1, 0),
    ]
    assert groups[0].oldest_born_timestamp == now_ms - 10 * MINUTE_MS
    client = create_app(DashboardSettings(store_dir=tmp_path / "store")).test_client()
    page = client.get("/transactions").get_data(as_text=True)
    assert 'href="/transactions"' in page
    rows = re.findall(
        r"<tr><td>([^<]*)</td><td>([^<]*)</td><td class=\"num pending\">(\d+)</td><td>([^<]*)"
        r"</td><td class=\"num age\">([^<]*)</td><td class=\"num checks\">(\d+)</td></tr>",
        page,
    )
    assert [(t, g, n, c) for t, g, n, _born, _age, c in rows] == [
        ("orders", "orders", "2", "2"),
        ("payments", "pg-pay", "1", "0"),
    ]
    assert rows[0][4].startswith("10 min") and rows[1][4].startswith("2 h 0 min"), rows
    assert rows[1][3].endswith("Z")


def test_a_producer_group_name_is_text_not_markup(tmp_path: Path) -> None:
    """A 4.x producer names its own group: the page shows it escaped."""
    with MessageStore.open(
        StoreConfig(root_dir=tmp_path / "store", segment_size_bytes=1 << 20)
    ) as s:
        _half(s, "orders", "<script>alert(1)</script>", "x", int(time.time() * 1000))
    client = create_app(DashboardSettings(store_dir=tmp_path / "store")).test_client()
    page = client.get("/transactions").get_data(as_text=True)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_store_without_transactions_says_so(tmp_path: Path) -> None:
    with MessageStore.open(
        StoreConfig(root_dir=tmp_path / "store", segment_size_bytes=1 << 20)
    ) as s:
        s.put(PutRequest("orders", b"plain"))
    client = create_app(DashboardSettings(store_dir=tmp_path / "store")).test_client()
    answer = client.get("/transactions")
    assert answer.status_code == 200
    assert "No pending transaction." in answer.get_data(as_text=True)


@pytest.mark.parametrize(
    ("age_ms", "text"),
    [(-5, "0 s"), (42_000, "42 s"), (185_000, "3 min 5 s"), (7_620_000, "2 h 7 min"),
     (273_600_000, "3 d 4 h")],
)  # fmt: skip
def test_ages_read_as_people_read_them(age_ms: int, text: str) -> None:
    assert age_text(age_ms) == text
