"""PURE: the value syntax of the ``rocketmq`` source's options, one value at a time.

Owns the documented option names and their value syntax (``OPTION_SYNTAX``, shown in every
error), the ``SourceError`` for a bad value (``bad_value``) and the parsers of one value:
integers, byte counts (``64m``), booleans, durations (``30s``), topic lists, patterns and the
offset JSON (``{"physical_offset": N}`` or Kafka's per-queue ``{"topic": {"queueId": n}}``).
Does not own which options go together or what they mean (``options.py``,
``option_modes.py``), nor the hint for an unknown name (``option_hints.py``).
"""

from __future__ import annotations

import json
import re

from rmq_spark.errors import SourceError

__all__ = [
    "EARLIEST_QUEUE_OFFSET",
    "LATEST_QUEUE_OFFSET",
    "OFFSET_KEY",
    "OPTION_NAMES",
    "OPTION_SYNTAX",
    "QueuePositions",
    "bad_value",
    "bool_value",
    "bytes_value",
    "duration_ms_value",
    "int_value",
    "is_queue_json",
    "offset_json",
    "pattern_value",
    "queue_json",
    "topics_value",
]

# (topic, queue id, queue offset or store time in ms); offsets -2 = earliest, -1 = latest
QueuePositions = tuple[tuple[str, int, int], ...]
EARLIEST_QUEUE_OFFSET = -2  # Kafka's spelling in per-partition JSON
LATEST_QUEUE_OFFSET = -1

# Documented spelling -> (value syntax shown in errors). Order is the order in the docs.
OPTION_SYNTAX: dict[str, str] = {
    "path": "a store directory (normally given to load())",
    "topics": "a comma-separated list of topic names",
    "topicPattern": "a regular expression a whole topic name must match",
    "startingOffsets": (
        'earliest, latest, group, a JSON object {"physical_offset": N} or per queue '
        '{"topic": {"queueId": queueOffset}} (-2 earliest, -1 latest)'
    ),
    "startingTimestamp": "store time in epoch milliseconds (an integer >= 0)",
    "endingOffsets": (
        'latest, a JSON object {"physical_offset": N} or per queue '
        '{"topic": {"queueId": queueOffset}} (-1 latest; batch queries only)'
    ),
    "endingTimestamp": "store time in epoch milliseconds (batch queries only)",
    "maxBytesPerTrigger": "a positive number of bytes, e.g. 67108864 or 64m (streaming only)",
    "maxMessagesPerTrigger": "a positive integer number of messages (streaming only)",
    "minPartitions": "a positive integer",
    "maxBytesPerPartition": "a positive number of bytes, e.g. 134217728 or 128m",
    "failOnDataLoss": "true or false",
    "includeBody": "true or false",
    "checkCrc": "true or false",
    "decompressBody": "true or false (false: compressed bodies as stored)",
    "isolation": "read_committed (no half or op records) or read_uncommitted (them too)",
    "driverReadMaxBytes": "a number of bytes >= 0, e.g. 4m; 0 turns it off (streaming only)",
    "minMessagesPerTrigger": "a positive integer number of messages (streaming only)",
    "maxTriggerDelay": "a duration such as 500ms, 30s, 15m or 1h (streaming only)",
    "startingOffsetsByTimestamp": 'per queue {"topic": {"queueId": epochMillis}}',
    "startingOffsetsByTimestampStrategy": "error or latest",
    "endingOffsetsByTimestamp": 'per queue {"topic": {"queueId": epochMillis}} (batch only)',
    "consumerGroup": "a RocketMQ consumer group name (letters, digits, %|_-; 255 at most)",
    "brokers": "the gRPC address host:port of the broker that holds the store",
    "accessKey": "the access key the broker's authentication knows (with secretKey)",
    "secretKey": "the secret key of accessKey (Spark redacts it from plans and logs)",
    "namesrv": "RocketMQ name servers host:port;host:port (instead of a store path)",
    "cluster": "the name of one cluster the name servers list (with namesrv)",
    "storeRoots": "comma-separated directories every discovered store must be under (with namesrv)",
}

OPTION_NAMES: tuple[str, ...] = tuple(OPTION_SYNTAX)
"""Every option the source accepts, in documented spelling."""

OFFSET_KEY = "physical_offset"


def bad_value(name: str, value: str, reason: str = "") -> SourceError:
    """The error for a bad value of option ``name``: the value, why, and the syntax expected."""
    detail = f" ({reason})" if reason else ""
    return SourceError(
        f"option {name}={value!r} is invalid{detail}; expected {OPTION_SYNTAX[name]}"
    )


def int_value(name: str, value: str, minimum: int) -> int:
    """An integer, at least ``minimum``."""
    text = value.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise bad_value(name, value, "not an integer")
    number = int(text)
    if number < minimum:
        raise bad_value(name, value, f"must be >= {minimum}")
    return number


_BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def bytes_value(name: str, value: str, minimum: int) -> int:
    """A byte count: an integer, optionally with a binary unit as Spark writes them (64m, 1g)."""
    match = re.fullmatch(r"\s*(\d+)\s*([bkmgt]?)b?\s*", value.lower())
    if not match:
        raise bad_value(name, value, "not a byte count")
    number = int(match.group(1)) * _BYTE_UNITS[match.group(2)]
    if number < minimum:
        raise bad_value(name, value, f"must be >= {minimum}")
    return number


def bool_value(name: str, value: str) -> bool:
    """``true`` or ``false``, in any letter case."""
    text = value.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise bad_value(name, value)


def offset_json(name: str, value: str) -> int:
    """The physical offset of ``{"physical_offset": N}``."""
    try:
        parsed = json.loads(value)
    except ValueError as err:
        raise bad_value(name, value, f"not JSON: {err}") from err
    if not isinstance(parsed, dict) or set(parsed) != {OFFSET_KEY}:
        raise bad_value(name, value, f'the JSON object must have exactly the key "{OFFSET_KEY}"')
    number = parsed[OFFSET_KEY]
    if not isinstance(number, int) or isinstance(number, bool) or number < 0:
        raise bad_value(name, value, "the physical offset must be an integer >= 0")
    return number


def topics_value(name: str, value: str) -> tuple[str, ...]:
    """A comma-separated topic list, without blanks or repeats (at least one topic)."""
    topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
    if not topics:
        raise bad_value(name, value, "no topic named")
    return topics


def pattern_value(name: str, value: str) -> str:
    """A non-empty regular expression that compiles."""
    try:
        re.compile(value)
    except re.error as err:
        raise bad_value(name, value, f"not a regular expression: {err}") from err
    if not value:
        raise bad_value(name, value, "empty")
    return value


_DURATION_MS = {"": 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def duration_ms_value(name: str, value: str) -> int:
    """A duration as Spark writes them (``timeStringAsMs``: a bare number is milliseconds)."""
    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h)?\s*", value.lower())
    if not match:
        raise bad_value(name, value, "not a duration")
    return int(match.group(1)) * _DURATION_MS[match.group(2) or ""]


def queue_json(name: str, value: str, minimum: int) -> QueuePositions:
    """``{"topic": {"queueId": n}}`` (Kafka's per-partition JSON) as sorted triples."""
    try:
        parsed = json.loads(value)
    except ValueError as err:
        raise bad_value(name, value, f"not JSON: {err}") from err
    if not isinstance(parsed, dict) or not parsed:
        raise bad_value(name, value, "a JSON object naming at least one topic")
    found: list[tuple[str, int, int]] = []
    for topic, queues in parsed.items():
        if not isinstance(queues, dict) or not queues:
            raise bad_value(
                name,
                value,
                f'the JSON object must have exactly the key "{OFFSET_KEY}" or map each topic '
                f"to an object of queues (topic {topic!r})",
            )
        for queue, number in queues.items():
            if not re.fullmatch(r"\d+", str(queue)) or int(queue) > 2**31 - 1:
                raise bad_value(name, value, f"queue id {queue!r} of topic {topic!r} is not an int")
            if not isinstance(number, int) or isinstance(number, bool) or number < minimum:
                raise bad_value(name, value, f"{topic}/{queue}: must be an integer >= {minimum}")
            found.append((str(topic), int(queue), number))
    return tuple(sorted(found))


def is_queue_json(text: str) -> bool:
    """A JSON object whose values are all objects: per-queue positions, not a physical one."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return False
    return (
        isinstance(parsed, dict)
        and bool(parsed)
        and all(isinstance(v, dict) for v in parsed.values())
    )
