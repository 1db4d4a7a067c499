"""PURE: the dashboard's URL and form parameters, typed and bounded before anything reads them.

Owns each parameter's type and range (offsets, times, page sizes, minutes, the refresh
interval, message ids and keys, topic and group names from a URL). A bad one raises
``ConfigError`` naming it, which ``app.py`` turns into a one-line 400 page. Names that become
part of a path are checked with the broker's rules (``broker/topics.py``), not a copy of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from rmq_spark.broker.topics import group_name_problem, stored_topic_problem
from rmq_spark.errors import ConfigError

__all__ = [
    "OFFSET_MAX",
    "PAGE_SIZE_MAX",
    "REFRESH_MAX_S",
    "SKIP_MAX",
    "TEXT_MAX",
    "TIME_MAX_MS",
    "int_arg",
    "parse_time_ms",
    "text_arg",
    "time_arg",
    "url_group",
    "url_topic",
]

OFFSET_MAX = 2**63 - 1  # a queue offset is a Java long
PAGE_SIZE_MAX = 500  # messages on one page: each is decoded and rendered whole
SKIP_MAX = 100_000  # messages stored in the same millisecond a time page may step over
REFRESH_MAX_S = 3600
TEXT_MAX = 256  # a message id, a key, a time: longer is not one of them
TIME_MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the widest time RocketMQ stores


def text_arg(args: Mapping[str, str], name: str) -> str:
    """``args[name]`` stripped ("" when absent): at most ``TEXT_MAX`` printable characters."""
    text = args.get(name, "").strip()
    if len(text) > TEXT_MAX:
        raise ConfigError(name, f"{len(text)} characters long, the limit is {TEXT_MAX}")
    if not text.isprintable():
        raise ConfigError(name, f"has control characters: {text[:40]!r}")
    return text


def int_arg(args: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    """``args[name]`` as a decimal integer in ``[low, high]``; ``default`` when absent or empty."""
    text = text_arg(args, name)
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        raise ConfigError(name, f"expected an integer in [{low}, {high}], got {text!r}")
    value = int(text)
    if not low <= value <= high:
        raise ConfigError(name, f"expected an integer in [{low}, {high}], got {value}")
    return value


def parse_time_ms(text: str, what: str) -> int:
    """Epoch milliseconds, or an ISO 8601 time (``2026-11-26T04:30``: UTC unless it names a
    zone, as the pages show times), in ``[0, TIME_MAX_MS]``. Raises ``ConfigError`` naming
    ``what`` and the text."""
    text = text.strip()
    if text.isascii() and text.isdigit() and len(text) <= 19:
        value = int(text)
    else:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ConfigError(what, f"not epoch milliseconds nor ISO 8601: {text!r}") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        value = round(moment.timestamp() * 1000)
    if not 0 <= value <= TIME_MAX_MS:
        raise ConfigError(what, f"a time between 1970 and 9999, got {text!r}")
    return value


def time_arg(args: Mapping[str, str], name: str, default: int) -> int:
    """``args[name]`` as epoch milliseconds (``parse_time_ms``); ``default`` when absent."""
    text = text_arg(args, name)
    return parse_time_ms(text, name) if text else default


def url_topic(name: str, what: str = "topic") -> str:
    """A topic name from the URL, checked with the broker's rule before it becomes part of a
    path under the store (``..``, ``/`` and their encodings are refused, not followed)."""
    problem = stored_topic_problem(name)
    if problem is not None:
        raise ConfigError(what, problem)
    return name


def url_group(name: str) -> str:
    """A consumer group's name from the URL (its ``%DLQ%<group>`` is a path under the store)."""
    problem = group_name_problem(name)
    if problem is not None:
        raise ConfigError("group", problem)
    return name
