"""Fixtures for the broker tests: broker subprocesses and the official client.

The official ``rocketmq-python-client`` is the real peer: it is imported once per session with
HOME pointed at a temp dir (it writes ``~/logs/rocketmq_python`` on import).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from broker_harness import BrokerProcess, start_broker


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """``broker_factory(*settings, store_dir=None)`` starts brokers; all are stopped at the end."""
    started: list[BrokerProcess] = []

    def factory(*settings: str, store_dir: Path | None = None) -> BrokerProcess:
        broker = start_broker(store_dir or tmp_path / "store", tmp_path / "work", *settings)
        started.append(broker)
        return broker

    yield factory
    for broker in started:
        if broker.proc.poll() is None:
            broker.kill()


@pytest.fixture
def official_producer(rocketmq: ModuleType) -> Iterator[Callable[..., Any]]:
    """``official_producer(address, topics=())``: a started client Producer, shut down after."""
    producers: list[Any] = []

    def make(address: str, topics: tuple[str, ...] = (), request_timeout: int = 10) -> Any:
        config = rocketmq.ClientConfiguration(
            address, rocketmq.Credentials(), request_timeout=request_timeout
        )
        producer = rocketmq.Producer(config, topics)
        producer.startup()
        producers.append(producer)
        return producer

    yield make
    for producer in producers:
        if producer.is_running:
            producer.shutdown()
