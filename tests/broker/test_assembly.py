"""``assembly.open_broker``: the one assembly of the broker process and the embedded broker,
taken apart in one order (announcers, refusal of new work, fronts, in-flight sends, files,
store), whatever fails on the way."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rmq_spark.broker.assembly import open_broker
from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.embedded import Broker
from rmq_spark.broker.service import SendCommand
from rmq_spark.clock import ManualClock
from rmq_spark.errors import BrokerError
from rmq_spark.store.config import StoreConfig

_SEGMENT = 16 * 1024 * 1024


def _store_config(root: Path) -> StoreConfig:
    return StoreConfig(root_dir=root, segment_size_bytes=_SEGMENT)


def test_close_stops_the_parts_in_one_order_and_closes_the_store_last(tmp_path: Path) -> None:
    root = tmp_path / "store"
    seen: list[tuple[str, bool, bool]] = []
    broker = open_broker(_store_config(root), BrokerConfig(), ManualClock())

    def note(name: str) -> None:  # (part, sends refused yet, the store still open: abort)
        seen.append((name, broker.service.shutting_down, (root / "abort").exists()))

    broker.fronts.callback(note, "grpc")
    broker.fronts.callback(note, "metrics")
    broker.announcers.callback(note, "namesrv")
    with broker:
        sent = broker.service.send(_command("orders"))
        assert sent.ok
    assert seen == [("namesrv", False, True), ("metrics", True, True), ("grpc", True, True)]
    assert _saved(root, "orders") and not (root / "abort").exists()
    with open_broker(_store_config(root), BrokerConfig(), ManualClock()) as again:  # unlocked
        assert again.service.route("orders").queue_count == BrokerConfig().default_queue_count


def test_a_failing_stop_still_saves_and_closes_the_rest(tmp_path: Path) -> None:
    root = tmp_path / "store"
    broker = open_broker(_store_config(root), BrokerConfig(), ManualClock())

    def broken() -> None:
        raise RuntimeError("the front failed to stop")

    broker.fronts.callback(broken)
    assert broker.service.send(_command("orders")).ok
    with pytest.raises(RuntimeError, match="failed to stop"):
        broker.close()
    assert _saved(root, "orders")
    open_broker(_store_config(root), BrokerConfig(), ManualClock()).close()  # lock released


def test_a_store_in_use_is_a_broker_error_and_opens_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with open_broker(_store_config(root), BrokerConfig(), ManualClock()):
        with pytest.raises(BrokerError, match="in use by another process"):
            open_broker(_store_config(root), BrokerConfig(), ManualClock())


def test_an_embedded_broker_whose_port_is_taken_releases_its_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BrokerError, match="already in use"):
            Broker(root, store_config=_store_config(root), listen=f"127.0.0.1:{port}")
    with Broker(root, store_config=_store_config(root)) as broker:
        assert broker.send("orders", b"after").ok


def _saved(root: Path, topic: str) -> bool:
    return f'"{topic}"' in (root / "config/topics.json").read_text(encoding="utf-8")


def _command(topic: str) -> SendCommand:
    return SendCommand(topic=topic, body=b"body", message_id=f"id-{topic}")
