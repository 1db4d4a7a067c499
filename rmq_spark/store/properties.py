"""PURE: the message properties string (``docs/FORMAT.md`` section 2.2).

Owns the ``name \\x01 value \\x02`` syntax (writing it, and parsing it the way 4.9.1+/5.x
brokers do), the property key constants of ``MessageConst`` (3.2), Java ``HashMap``
iteration order (to reproduce Java's bytes) and small helpers that read KEYS, TAGS,
UNIQ_KEY and DELAY. Does not own the record layout (``codec.py``) or hashing (``hashing.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from rmq_spark.errors import InvalidMessageError
from rmq_spark.store.hashing import java_string_hash

__all__ = [
    "BORN_TIMESTAMP",
    "BUYER_ID",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "CLUSTER",
    "CONSUME_START_TIME",
    "CORRELATION_ID",
    "CRC32",
    "DELAY",
    "DLQ_ORIGIN_MESSAGE_ID",
    "DLQ_ORIGIN_TOPIC",
    "DUP_INFO",
    "EXTEND_UNIQ_INFO",
    "INNER_BASE",
    "INNER_MULTI_DISPATCH",
    "INNER_MULTI_QUEUE_OFFSET",
    "INNER_NUM",
    "KEYS",
    "KEY_SEPARATOR",
    "MAX_OFFSET",
    "MAX_RECONSUME_TIMES",
    "MIN_OFFSET",
    "MSG_REGION",
    "MSG_TYPE",
    "NAME_VALUE_SEPARATOR",
    "ORIGIN_MESSAGE_ID",
    "PRODUCER_GROUP",
    "PROPERTY_SEPARATOR",
    "REAL_QID",
    "REAL_TOPIC",
    "RECONSUME_TIME",
    "RETRY_TOPIC",
    "SHARDING_KEY",
    "TAGS",
    "TIMER_DELAY_LEVEL",
    "TIMER_DELAY_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS",
    "TIMER_DEL_UNIQKEY",
    "TIMER_DEQUEUE_MS",
    "TIMER_ENQUEUE_MS",
    "TIMER_OUT_MS",
    "TIMER_ROLL_TIMES",
    "TRACE_ON",
    "TRANSACTION_CHECK_TIMES",
    "TRANSACTION_ID",
    "TRANSACTION_PREPARED",
    "TRANSACTION_PREPARED_QUEUE_OFFSET",
    "UNIQ_KEY",
    "WAIT",
    "delay_level_of",
    "encode_properties",
    "java_hashmap_order",
    "parse_properties",
]

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "

# --- MessageConst keys (section 3.2) ----------------------------------------------------------
KEYS = "KEYS"
TAGS = "TAGS"
WAIT = "WAIT"
DELAY = "DELAY"
RETRY_TOPIC = "RETRY_TOPIC"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
TRANSACTION_PREPARED = "TRAN_MSG"
PRODUCER_GROUP = "PGROUP"
MIN_OFFSET = "MIN_OFFSET"
MAX_OFFSET = "MAX_OFFSET"
BUYER_ID = "BUYER_ID"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUME_TIME = "RECONSUME_TIME"
MSG_REGION = "MSG_REGION"
TRACE_ON = "TRACE_ON"
UNIQ_KEY = "UNIQ_KEY"
EXTEND_UNIQ_INFO = "EXTEND_UNIQ_INFO"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
CONSUME_START_TIME = "CONSUME_START_TIME"
INNER_NUM = "INNER_NUM"
INNER_BASE = "INNER_BASE"
DUP_INFO = "DUP_INFO"
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
TRANSACTION_ID = "__transactionId__"
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
CORRELATION_ID = "CORRELATION_ID"
CLUSTER = "CLUSTER"
MSG_TYPE = "MSG_TYPE"
INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
SHARDING_KEY = "__SHARDINGKEY"
BORN_TIMESTAMP = "BORN_TIMESTAMP"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
TIMER_DELAY_LEVEL = "TIMER_DELAY_LEVEL"
CRC32 = "__CRC32#"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"

# Java parseInt accepts an optional sign and any Unicode decimal digits (Character.digit).
_JAVA_INT = re.compile(r"[+-]?\d+")


def encode_properties(properties: Mapping[str, str], trailing_separator: bool = True) -> str:
    """Serialize a property map as ``name \\x01 value \\x02 ...`` in the mapping's order.

    Parameters
    ----------
    properties
        Keys and values; iteration order is the stored order (see ``java_hashmap_order``
        to reproduce a Java broker's bytes).
    trailing_separator
        Keep the last ``\\x02`` (writers <= 4.9.0 and >= 5.2.0) or drop it (4.9.1-5.1.4).

    Raises
    ------
    InvalidMessageError
        An empty key or value (the parser would drop it), a key containing ``\\x01`` or
        ``\\x02``, or a value containing ``\\x02``: none of these would read back equal.

    Examples
    --------
    >>> encode_properties({"TAGS": "TagA", "KEYS": "k1 k2"})
    'TAGS\\x01TagA\\x02KEYS\\x01k1 k2\\x02'
    """
    parts = []
    for key, value in properties.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidMessageError("properties", f"{key!r}={value!r}: keys and values are str")
        if not key or not value:
            raise InvalidMessageError("properties", f"{key!r}={value!r}: empty key or value")
        if NAME_VALUE_SEPARATOR in key or PROPERTY_SEPARATOR in key:
            raise InvalidMessageError("properties", f"key {key!r} contains \\x01 or \\x02")
        if PROPERTY_SEPARATOR in value:
            raise InvalidMessageError("properties", f"value of {key!r} contains \\x02")
        parts.append(f"{key}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}")
    text = "".join(parts)
    if not trailing_separator and text:
        text = text[:-1]
    return text


def parse_properties(text: str) -> dict[str, str]:
    """Parse a stored properties string like a 4.9.1+/5.x broker (``docs/FORMAT.md`` 2.2).

    Accepts a trailing ``\\x02`` or none; a value may contain ``\\x01`` (only the first one
    splits); entries with an empty key or value are dropped; a later duplicate key wins.
    The record CRC property (``__CRC32#``, ``docs/FORMAT.md`` 2.3) is integrity data of the
    record, not a property of the message: it is left out (RocketMQ's proxy hides it too).

    Examples
    --------
    >>> parse_properties("TAGS\\x01TagA\\x02KEYS\\x01k1")
    {'TAGS': 'TagA', 'KEYS': 'k1'}
    """
    result: dict[str, str] = {}
    if not text:
        return result
    for item in text.split(PROPERTY_SEPARATOR):
        key, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if key and value:
            result[key] = value
    if CRC32 in result:
        del result[CRC32]
    return result


def java_hashmap_order(keys: Iterable[str], initial_capacity: int = 16) -> list[str]:
    """``keys`` in the iteration order of a Java ``HashMap`` they were inserted into.

    Bucket ``(h ^ (h >>> 16)) & (n - 1)`` ascending, ties in insertion order, with ``n`` the
    final table size (doubling while size > 0.75 n). 4.9.x broker maps start at 16, 5.x's
    ``string2messageProperties`` at 128. Duplicates keep their first position.
    """
    unique = list(dict.fromkeys(keys))
    size = 1
    while size < initial_capacity:
        size <<= 1
    while len(unique) > size * 3 // 4:
        size <<= 1

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (size - 1)

    return sorted(unique, key=bucket)  # sorted() is stable: ties stay in insertion order


def delay_level_of(properties: Mapping[str, str]) -> int:
    """The DELAY level as Java's ``Integer.parseInt`` reads it; 0 when absent.

    Raises
    ------
    ValueError
        DELAY is not a decimal int32 (Java would throw ``NumberFormatException``).
    """
    text = properties.get(DELAY)
    if text is None:
        return 0
    if not _JAVA_INT.fullmatch(text) or not -(1 << 31) <= int(text) < (1 << 31):
        raise ValueError(f"property {DELAY}: not a decimal int32: {text!r}")
    return int(text)
