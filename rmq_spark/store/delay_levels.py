"""PURE: delay levels of scheduled messages (docs/DELAY.md, docs/FORMAT.md 6).

Owns the ``messageDelayLevel`` syntax (``"1s 5s ... 2h"``), level <-> schedule queue id, and
the delivery timestamp the ConsumeQueue of ``SCHEDULE_TOPIC_XXXX`` stores as tagsCode. Does
not own the redelivery loop or its clock (``rmq_spark/delay``).
"""

from __future__ import annotations

import re

__all__ = [
    "DEFAULT_MESSAGE_DELAY_LEVEL",
    "delivery_time_ms",
    "level_of_queue_id",
    "parse_message_delay_level",
    "queue_id_of_level",
    "schedule_tags_code",
]

DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_NUMBER = re.compile(r"\+?\d+")  # Long.parseLong: any Unicode decimal digits
_UNKNOWN_LEVEL_DELAY_MS = 1000


def parse_message_delay_level(text: str) -> tuple[int, ...]:
    """Milliseconds of each delay level; level ``n`` is element ``n - 1``.

    Tokens are separated by single spaces; each is a non-negative decimal number and a unit
    ``s``, ``m``, ``h`` or ``d`` (lower case, as RocketMQ's table).

    Raises
    ------
    ValueError
        An empty string, an empty token (two spaces), a bad number or unit; the message
        names the token and its level.

    Examples
    --------
    >>> parse_message_delay_level("1s 2m 1h")
    (1000, 120000, 3600000)
    """
    if not text:
        raise ValueError("message delay level: empty; expected e.g. '1s 5s 10s'")
    levels = []
    for index, token in enumerate(text.split(" ")):
        unit_ms = _UNIT_MS.get(token[-1:])
        number = token[:-1]
        if unit_ms is None or not _NUMBER.fullmatch(number):
            raise ValueError(
                f"message delay level {index + 1}: bad token {token!r} "
                "(expected a number and a unit s, m, h or d, separated by single spaces)"
            )
        delay_ms = int(number) * unit_ms
        if delay_ms >= 1 << 63:
            raise ValueError(f"message delay level {index + 1}: {token!r} overflows int64 ms")
        levels.append(delay_ms)
    return tuple(levels)


def queue_id_of_level(level: int) -> int:
    """Queue id of ``SCHEDULE_TOPIC_XXXX`` holding delay ``level`` (``level - 1``)."""
    if level < 1:
        raise ValueError(f"delay level must be >= 1, got {level}")
    return level - 1


def level_of_queue_id(queue_id: int) -> int:
    """Delay level held by ``SCHEDULE_TOPIC_XXXX`` queue ``queue_id`` (``queue_id + 1``)."""
    if queue_id < 0:
        raise ValueError(f"queue id must be >= 0, got {queue_id}")
    return queue_id + 1


def delivery_time_ms(store_timestamp_ms: int, level: int, levels: tuple[int, ...]) -> int:
    """When a message stored at ``store_timestamp_ms`` with delay ``level`` falls due.

    ``level`` above the highest level is clamped to it; a level with no entry (<= 0, or
    no levels at all) is "unknown" and falls due one second later, as Java's
    ``computeDeliverTimestamp``.
    """
    level = min(level, len(levels))
    if level >= 1:
        return store_timestamp_ms + levels[level - 1]
    return store_timestamp_ms + _UNKNOWN_LEVEL_DELAY_MS


def schedule_tags_code(
    store_timestamp_ms: int, delay_level: int, levels: tuple[int, ...]
) -> int | None:
    """tagsCode of a ``SCHEDULE_TOPIC_XXXX`` record: its delivery time, or ``None``.

    ``None`` when the clamped level is not positive: then RocketMQ keeps the TAGS hash
    (FORMAT.md 6, ``checkMessageAndReturnSize``).
    """
    level = min(delay_level, len(levels))
    if level <= 0:
        return None
    return delivery_time_ms(store_timestamp_ms, level, levels)
