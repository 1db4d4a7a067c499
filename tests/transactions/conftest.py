"""Fixtures for the transaction tests: broker subprocesses (``tests/broker/broker_harness.py``)
and the official Python client's transactional producer and simple consumer."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_BROKER_TESTS = str(Path(__file__).resolve().parents[1] / "broker")
if _BROKER_TESTS not in sys.path:
    sys.path.insert(0, _BROKER_TESTS)

from broker_harness import BrokerProcess, start_broker  # noqa: E402

SMALL = "store.segment_size_bytes=16777216"  # 16 MiB segments: the disk is shared


@pytest.fixture
def tx_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """``tx_broker(*settings, store_dir=None)`` starts brokers; all are killed at the end."""
    started: list[BrokerProcess] = []

    def factory(*settings: str, store_dir: Path | None = None) -> BrokerProcess:
        broker = start_broker(store_dir or tmp_path / "store", tmp_path / "work", SMALL, *settings)
        started.append(broker)
        return broker

    yield factory
    for broker in started:
        if broker.proc.poll() is None:
            broker.kill()


@pytest.fixture
def tx_clients(rocketmq: ModuleType) -> Iterator[Callable[..., Any]]:
    """``tx_clients(kind, address, *args, credentials=None)``: a started official client;
    kind ``producer`` (args: topics, decide) or ``simple`` (args: group, topics)."""
    started: list[Any] = []

    def make(kind: str, address: str, *args: Any, credentials: Any = None) -> Any:
        creds = rocketmq.Credentials(*credentials) if credentials else rocketmq.Credentials()
        config = rocketmq.ClientConfiguration(address, creds, request_timeout=10)
        if kind == "producer":
            topics, decide = args
            checker = _checker(rocketmq, decide)
            client = rocketmq.Producer(config, topics, checker=checker)
        else:
            group, topics = args
            subscription = {t: rocketmq.FilterExpression("*") for t in topics}
            client = rocketmq.SimpleConsumer(config, group, subscription, await_duration=2)
        started.append(client)
        client.startup()
        return client

    yield make
    for client in started:
        if client.is_running:
            client.shutdown()


def _checker(rocketmq: ModuleType, decide: Callable[[Any], Any]) -> Any:
    class Checker(rocketmq.TransactionChecker):  # type: ignore[misc, name-defined]
        def check(self, message: Any) -> Any:
            return decide(message)

    return Checker()
