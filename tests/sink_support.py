"""Helpers for the rocketmq sink's tests: read back what a store holds, start a broker.

Records are read from the CommitLog segments with CRC checks (``broker_harness.read_records``);
the broker subprocess is the one tests/broker start (``broker_harness.start_broker``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "broker"))

from broker_harness import (  # noqa: E402
    BrokerProcess,
    read_records,
    start_broker,
    wait_for,
)

from rmq_spark.store.properties import parse_properties  # noqa: E402

__all__ = ["BrokerProcess", "start_broker", "stored_messages", "wait_for"]


def stored_messages(root: Path) -> list[dict[str, str]]:
    """Every record of the store: its properties, plus ``topic`` and ``body`` (UTF-8)."""
    return [
        parse_properties(r.properties) | {"topic": r.topic, "body": r.body.decode()}
        for r in read_records(root)
    ]
