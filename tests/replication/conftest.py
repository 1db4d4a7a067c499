"""Fixtures for the replication tests: master and slave broker processes, the official
client (``tests/broker``'s harness, reused)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from broker.broker_harness import BrokerProcess, start_broker
from replication_harness import SEGMENT


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """``brokers(name, *settings)``: a broker on store ``tmp_path/name``; killed at the end."""
    started: list[BrokerProcess] = []

    def factory(name: str, *settings: str) -> BrokerProcess:
        broker = start_broker(tmp_path / name, tmp_path / "work", SEGMENT, *settings)
        started.append(broker)
        return broker

    yield factory
    for broker in started:
        if broker.proc.poll() is None:
            broker.kill()


@pytest.fixture
def producer_for(rocketmq: ModuleType) -> Iterator[Callable[..., Any]]:
    """``producer_for(address, topics)``: a started official Producer, shut down after."""
    producers: list[Any] = []

    def make(address: str, topics: tuple[str, ...] = ()) -> Any:
        config = rocketmq.ClientConfiguration(address, rocketmq.Credentials(), request_timeout=10)
        producer = rocketmq.Producer(config, topics)
        producer.startup()
        producers.append(producer)
        return producer

    yield make
    for producer in producers:
        if producer.is_running:
            producer.shutdown()
