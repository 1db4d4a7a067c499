"""PURE: where a query of the ``rocketmq`` source starts and where a batch query ends.

Owns ``StartingMode`` and ``EndingMode`` and how the starting options (``startingOffsets``,
``startingTimestamp``, ``startingOffsetsByTimestamp`` and its strategy) and the ending options
(``endingOffsets``, ``endingTimestamp``, ``endingOffsetsByTimestamp``) pick one, with Kafka's
precedence between them. Does not own the value syntax (``option_values.py``) or the other
options (``options.py``).
"""

from __future__ import annotations

import enum

from rmq_spark.errors import SourceError
from rmq_spark.spark.option_values import (
    EARLIEST_QUEUE_OFFSET,
    LATEST_QUEUE_OFFSET,
    bad_value,
    int_value,
    is_queue_json,
    offset_json,
    queue_json,
)

__all__ = ["EndingMode", "StartingMode", "ending_values", "starting_values"]


class StartingMode(enum.Enum):
    """Where a query starts reading."""

    EARLIEST = "earliest"  # the oldest byte still stored
    LATEST = "latest"  # the durable end when the query starts
    OFFSET = "offset"  # an explicit physical offset (startingOffsets JSON)
    TIMESTAMP = "timestamp"  # the first record stored at or after startingTimestamp
    QUEUES = "queues"  # per queue: startingOffsets {"topic": {"queue": n}} or ...ByTimestamp
    GROUP = "group"  # where consumerGroup's committed offsets point (group_offsets.py)


class EndingMode(enum.Enum):
    """Where a batch query stops reading."""

    LATEST = "latest"  # the durable end when the query is planned
    OFFSET = "offset"  # an explicit physical offset (endingOffsets JSON)
    TIMESTAMP = "timestamp"  # the first record stored at or after endingTimestamp
    QUEUES = "queues"  # per queue: endingOffsets {"topic": {"queue": n}}


def starting_values(raw: dict[str, str], streaming: bool) -> dict[str, object]:
    """The ``SourceOptions`` fields the starting options set (canonical names in ``raw``)."""
    strategy = raw.get("startingOffsetsByTimestampStrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise bad_value("startingOffsetsByTimestampStrategy", strategy)
    if "startingOffsetsByTimestamp" in raw:  # Kafka's precedence: before startingTimestamp
        times = queue_json("startingOffsetsByTimestamp", raw["startingOffsetsByTimestamp"], 0)
        return {
            "starting_mode": StartingMode.QUEUES,
            "starting_queue_times": times,
            "timestamp_strategy_latest": strategy == "latest",
        }
    if "startingTimestamp" in raw:  # takes precedence over startingOffsets, as in Kafka's source
        return {
            "starting_mode": StartingMode.TIMESTAMP,
            "starting_timestamp_ms": int_value("startingTimestamp", raw["startingTimestamp"], 0),
        }
    text = raw.get("startingOffsets", "latest" if streaming else "earliest").strip()
    if text.lower() == "earliest":
        return {"starting_mode": StartingMode.EARLIEST}
    if text.lower() == "latest":
        if not streaming:
            raise bad_value("startingOffsets", text, "latest is for streaming queries only")
        return {"starting_mode": StartingMode.LATEST}
    if text.startswith("{") and is_queue_json(text):
        queues = queue_json("startingOffsets", text, EARLIEST_QUEUE_OFFSET)
        if any(n == LATEST_QUEUE_OFFSET for _, _, n in queues):  # docs/SOURCE.md: why not
            raise bad_value("startingOffsets", text, "-1 (latest) per queue is not supported")
        return {"starting_mode": StartingMode.QUEUES, "starting_queues": queues}
    if text.lower() == "group":
        if not streaming:
            raise bad_value("startingOffsets", text, "group is for streaming queries only")
        return {"starting_mode": StartingMode.GROUP}
    if text.startswith("{"):
        return {
            "starting_mode": StartingMode.OFFSET,
            "starting_physical_offset": offset_json("startingOffsets", text),
        }
    raise bad_value("startingOffsets", text)


def ending_values(raw: dict[str, str], streaming: bool) -> dict[str, object]:
    """The ``SourceOptions`` fields the ending options set; refused for a streaming query."""
    for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        if name in raw and streaming:
            raise SourceError(f"option {name} applies to batch queries only (spark.read)")
    if "endingOffsetsByTimestamp" in raw:  # Kafka's precedence: before endingTimestamp
        times = queue_json("endingOffsetsByTimestamp", raw["endingOffsetsByTimestamp"], 0)
        return {"ending_mode": EndingMode.QUEUES, "ending_queue_times": times}
    if "endingTimestamp" in raw:  # takes precedence over endingOffsets
        return {
            "ending_mode": EndingMode.TIMESTAMP,
            "ending_timestamp_ms": int_value("endingTimestamp", raw["endingTimestamp"], 0),
        }
    text = raw.get("endingOffsets", "latest").strip()
    if text.lower() == "latest":
        return {"ending_mode": EndingMode.LATEST}
    if text.startswith("{") and is_queue_json(text):
        queues = queue_json("endingOffsets", text, LATEST_QUEUE_OFFSET)
        return {"ending_mode": EndingMode.QUEUES, "ending_queues": queues}
    if text.startswith("{"):
        return {
            "ending_mode": EndingMode.OFFSET,
            "ending_physical_offset": offset_json("endingOffsets", text),
        }
    raise bad_value("endingOffsets", text)
