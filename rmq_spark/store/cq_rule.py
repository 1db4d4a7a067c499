"""PURE: what a CommitLog record's ConsumeQueue unit is (docs/FORMAT.md 6): the one rule
both dispatch paths use.

Owns whether a record gets a unit (transaction type NOT or COMMIT, ``dispatches``) and its
tagsCode (``unit_tags_code``: the Java hash of TAGS; the delivery time for
``SCHEDULE_TOPIC_XXXX`` with a positive DELAY and, as the reput job's ``consume_queue``
table has it, ``TIMER_OUT_MS`` (else ``TIMER_DELIVER_MS``) for ``rmq_sys_wheel_timer``).
The live path (``cq_facts.py``: facts the put path hands over) and the recovery scan
(``cq_dispatch.collect_units``: records read back) both call it; ``TagsCodes`` is its first
branch for whole columns, for records whose properties are only TAGS and UNIQ_KEY.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from rmq_spark.store.delay_levels import schedule_tags_code
from rmq_spark.store.hashing import tags_code
from rmq_spark.store.layout import (
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
)
from rmq_spark.store.properties import (
    TAGS,
    TIMER_DELIVER_MS,
    TIMER_OUT_MS,
    delay_level_of,
    parse_properties,
)

__all__ = [
    "DISPATCHED_TRANSACTION_TYPES",
    "SPECIAL_TOPICS",
    "TagsCodes",
    "dispatches",
    "special_tags_code",
    "tags_of",
    "unit_tags_code",
]

SPECIAL_TOPICS = frozenset({RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC})
"""Topics whose tagsCode may come from properties other than TAGS."""
_TAGS_MARK = TAGS + "\x01"
_INTEGRAL = re.compile(r"[\x00-\x20]*([+-]?[0-9]+)[\x00-\x20]*")  # as the reput table reads
_CACHE_MAX = 4096


DISPATCHED_TRANSACTION_TYPES = (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
"""SYSFLAG transaction types whose records get a unit (``sys_flag & TRANSACTION_MASK``)."""


def dispatches(sys_flag: int) -> bool:
    """Whether a record with this SYSFLAG gets a unit (transaction type NOT or COMMIT; a
    prepared or rolled-back transaction message does not, as in RocketMQ)."""
    return sys_flag & TRANSACTION_MASK in DISPATCHED_TRANSACTION_TYPES


def unit_tags_code(
    topic: str,
    properties: str | None,
    tags: str | None,
    store_timestamp_ms: int,
    delay_levels_ms: tuple[int, ...],
) -> int:
    """The tagsCode of a record's unit (docs/FORMAT.md 6).

    ``properties``: the record's stored properties string; ``None`` for a record whose
    properties are only ``tags`` (as TAGS) and a UNIQ_KEY (a template or columns put), when
    ``tags`` is read instead.
    """
    if topic not in SPECIAL_TOPICS:
        return tags_code(tags_of(properties) if properties is not None else tags)
    if properties is None:
        return tags_code(tags)  # no DELAY, TIMER_OUT_MS nor TIMER_DELIVER_MS
    parsed = parse_properties(properties)
    special = special_tags_code(topic, parsed, store_timestamp_ms, delay_levels_ms)
    return tags_code(parsed.get(TAGS)) if special is None else special


def special_tags_code(
    topic: str, parsed: Mapping[str, str], store_timestamp_ms: int, delay_levels_ms: tuple[int, ...]
) -> int | None:
    """The tagsCode a record of ``SPECIAL_TOPICS`` gets from its properties (``parsed`` as
    ``parse_properties`` reads them) instead of its TAGS hash; ``None``: the TAGS hash.
    The reput job's vectorised rule calls this for those rows (``spark/reput_rows.py``)."""
    if topic == RMQ_SYS_SCHEDULE_TOPIC:
        try:
            level = delay_level_of(parsed)
        except ValueError:
            return None
        return schedule_tags_code(store_timestamp_ms, level, delay_levels_ms)
    if topic == RMQ_SYS_WHEEL_TIMER_TOPIC:
        for key in (TIMER_OUT_MS, TIMER_DELIVER_MS):
            value = _int64(parsed.get(key))
            if value is not None:
                return value
    return None


class TagsCodes(dict[str | None, int]):
    """``unit_tags_code`` of records outside ``SPECIAL_TOPICS`` whose properties are only
    TAGS and a UNIQ_KEY, by TAGS, remembered (``codes`` maps a whole column in C)."""

    def __missing__(self, tags: str | None) -> int:
        if len(self) >= _CACHE_MAX:
            self.clear()
        code = self[tags] = tags_code(tags)
        return code

    def codes(self, tags: Iterable[str | None]) -> list[int]:
        return list(map(self.__getitem__, tags))


def tags_of(text: str) -> str | None:
    """The TAGS of a stored properties string, as ``parse_properties(text).get("TAGS")``
    reads it (the last non-empty TAGS entry), without splitting the whole string."""
    at = text.rfind(_TAGS_MARK)
    while at >= 0:
        if at == 0 or text[at - 1] == "\x02":
            start = at + len(_TAGS_MARK)
            end = text.find("\x02", start)
            value = text[start:] if end < 0 else text[start:end]
            if value:
                return value
        at = text.rfind(_TAGS_MARK, 0, at)
    return None


def _int64(text: str | None) -> int | None:
    match = _INTEGRAL.fullmatch(text) if text is not None else None
    if match is None:
        return None
    value = int(match.group(1))
    return value if -(1 << 63) <= value < (1 << 63) else None
