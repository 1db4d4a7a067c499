"""Helpers for the rocketmq sink's tests: read back what a store holds, start a broker.

Records are read from the CommitLog segments with CRC checks (``broker_harness.read_records``);
the broker subprocess is the one tests/broker start (``broker_harness.start_broker``).
"""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "broker"))

from broker_harness import (  # noqa: E402
    BrokerProcess,
    read_records,
    start_broker,
    wait_for,
)

from rmq_spark.store.layout import COMMITLOG_DIR, MESSAGE_MAGIC_CODES, is_segment_name  # noqa: E402
from rmq_spark.store.properties import parse_properties  # noqa: E402

__all__ = ["BrokerProcess", "count_records", "start_broker", "stored_messages", "wait_for"]


def stored_messages(root: Path) -> list[dict[str, str]]:
    """Every record of the store: its properties, plus ``topic`` and ``body`` (UTF-8)."""
    return [
        parse_properties(r.properties) | {"topic": r.topic, "body": r.body.decode()}
        for r in read_records(root)
    ]


def count_records(root: Path) -> int:
    """How many message records the store's CommitLog holds, from their headers only (cheap
    enough to poll while a writer runs; a torn last record may be counted)."""
    count = 0
    segment_dir = root / COMMITLOG_DIR
    if not segment_dir.is_dir():
        return 0
    for path in sorted(p for p in segment_dir.iterdir() if is_segment_name(p.name)):
        with (
            path.open("rb") as handle,
            mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data,
        ):
            position = 0
            while position + 8 <= len(data):
                size = int.from_bytes(data[position : position + 4], "big")
                magic = int.from_bytes(data[position + 4 : position + 8], "big")
                if size <= 0 or magic not in MESSAGE_MAGIC_CODES:
                    break  # the end of what is written, or a BLANK: the next segment
                count += 1
                position += size
    return count
