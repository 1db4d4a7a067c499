"""The put path's thinking: requests, results, validation, encoding, queue offsets, dedupe.

Owns ``PutRequest``/``PutResult``/``PutStatus``; the checks RocketMQ makes before a message is
stored (topic rules of ``TopicValidator`` and 5.x ``HookUtils``, body, properties and record
size limits, queue id); the broker-side property edits (UNIQ_KEY assignment, the delay-level
rewrite of docs/DELAY.md); pre-encoding a record outside the put lock; the per (topic, queue id)
queue-offset table; and the idempotency window. Does not own files, locks or flushing
(``message_store.py``, ``commitlog.py``, ``flush.py``).

Properties strings are written the way a 5.x broker writes them: keys in Java ``HashMap``
iteration order of a map of capacity 128 (5.x ``string2messageProperties``), with the
trailing ``\\x02`` (5.2+).

Idempotent puts: the store remembers the last ``idempotency_window_messages`` records that
carry a UNIQ_KEY, keyed by (stored topic, UNIQ_KEY). A request with ``idempotent=True`` whose
key is in the window is not written again: the put returns the original record's result with
``duplicate=True``. The key uses the *stored* topic, so a delayed message (stored in
``SCHEDULE_TOPIC_XXXX``) and its later redelivery to the real topic (same UNIQ_KEY) are two
different records, while a retried redelivery is stored once. The window is rebuilt on open
by rescanning the log from the oldest record it held (``recovery.py``).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, NamedTuple

from rmq_spark.errors import InvalidMessageError
from rmq_spark.store.codec import (
    encode_record_mutable,
    store_timestamp_position,
)
from rmq_spark.store.hashing import java_string_hash
from rmq_spark.store.layout import (
    MAX_PROPERTIES_SIZE_BYTES,
    RMQ_SYS_SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
)
from rmq_spark.store.message import LOCALHOST, HostAddress, MessageRecord
from rmq_spark.store.properties import (
    DELAY,
    KEYS,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    REAL_QID,
    REAL_TOPIC,
    TAGS,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    UNIQ_KEY,
    delay_level_of,
    encode_properties,
    java_hashmap_order,
)
from rmq_spark.store.put_encode import encode_ipv4_v1
from rmq_spark.store.record_crc import with_record_crc, without_record_crc

__all__ = [
    "MAX_RECORD_OVERHEAD_BYTES",
    "PreparedMessage",
    "PutContext",
    "PutRequest",
    "PutResult",
    "PutStatus",
    "check_topic",
    "find_uniq_key",
    "order_properties",
    "prepare",
    "properties_text",
    "rewrite_delay",
]

MAX_RECORD_OVERHEAD_BYTES = 64 * 1024
"""A record may exceed ``max_message_size_bytes`` (a body limit) by this much, as in RocketMQ."""

_TOPIC_CHARS = re.compile(r"[%|a-zA-Z0-9_\-]+", re.ASCII)
_TOPIC_MAX_LENGTH = 127
_TOPIC_MAX_LENGTH_RETRY = 255
_RETRY_PREFIX = "%RETRY%"
_JAVA_MAP_CAPACITY = 128
_JAVA_MAP_MAX_KEYS = _JAVA_MAP_CAPACITY * 3 // 4


class PutStatus(enum.Enum):
    """Outcome of a put (RocketMQ ``PutMessageStatus``); only ``PUT_OK`` means stored."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # stored, but the fsync did not finish in time
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"  # could not create the next segment
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"  # bad topic, queue id, body size, field value
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"  # properties over 32767 bytes
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"  # store closed or failed (fail-closed)
    UNKNOWN_ERROR = "UNKNOWN_ERROR"  # the write or fsync failed (disk full, I/O error)


# Not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__, three
# times a plain one's cost, and a broker builds one per send. Nothing changes one once built.
@dataclass(slots=True)
class PutRequest:
    """One message to store.

    ``properties`` are the producer's properties (TAGS, KEYS, UNIQ_KEY, DELAY, user keys);
    ``tags`` and ``keys`` are shortcuts merged into them. ``raw_properties`` instead stores a
    properties string verbatim, with no UNIQ_KEY assignment and no delay rewrite: that is how
    RocketMQ re-puts a message it copies (delay redelivery, transaction commit, docs/DELAY.md).
    """

    topic: str
    body: bytes = b""
    queue_id: int = 0
    properties: Mapping[str, str] | None = None
    tags: str | None = None
    keys: tuple[str, ...] | str = ()  # a str is one KEYS value (space-separated keys)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp_ms: int | None = None  # None: the store timestamp clock's now
    born_host: HostAddress = LOCALHOST
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    raw_properties: str | None = None
    idempotent: bool = False  # dedupe on (stored topic, UNIQ_KEY) within the recent window


@dataclass(slots=True, eq=True)
class PutResult:
    """What a put did. ``topic``/``queue_id`` are the *stored* ones (e.g. the schedule topic
    of a delayed message). ``msg_id`` is the offset message id (``docs/FORMAT.md`` 5)."""

    status: PutStatus
    physical_offset: int = -1
    queue_offset: int = -1
    msg_id: str = ""
    topic: str = ""
    queue_id: int = -1
    store_timestamp_ms: int = 0
    uniq_key: str | None = None
    total_size: int = 0
    duplicate: bool = False
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


class PreparedMessage:
    """A request encoded outside the lock, waiting for its offsets and store timestamp."""

    __slots__ = (
        "buf",
        "size",
        "topic",
        "queue_id",
        "consumes_queue_offset",
        "uniq_key",
        "timestamp_position",
        "idempotent",
        "properties",
        "sys_flag",
    )

    def __init__(
        self,
        buf: bytearray,
        topic: str,
        queue_id: int,
        consumes_queue_offset: bool,
        uniq_key: str | None,
        timestamp_position: int,
        idempotent: bool,
        properties: str | None = None,
        sys_flag: int = 0,
    ) -> None:
        self.buf = buf
        self.size = len(buf)
        self.topic = topic
        self.queue_id = queue_id
        self.consumes_queue_offset = consumes_queue_offset
        self.uniq_key = uniq_key
        self.timestamp_position = timestamp_position
        self.idempotent = idempotent
        self.properties = properties  # as stored, but for the record CRC (ConsumeQueue facts)
        self.sys_flag = sys_flag


def _illegal(detail: str, status: PutStatus = PutStatus.MESSAGE_ILLEGAL) -> PutResult:
    return PutResult(status, detail=detail)


_topic_checks: dict[str, str] = {}


def check_topic(topic: object) -> str:
    """Why ``topic`` cannot be stored, or ``""`` if it can.

    RocketMQ ``TopicValidator``: non-blank, only ``[%|a-zA-Z0-9_-]``; 5.x ``HookUtils``:
    at most 127 UTF-8 bytes unless it starts with ``%RETRY%``, and never more than 255.
    """
    if isinstance(topic, str):
        cached = _topic_checks.get(topic)
        if cached is not None:
            return cached
    if not isinstance(topic, str) or not topic.strip():
        return "topic is blank"
    if not _TOPIC_CHARS.fullmatch(topic):
        reason = f"topic {topic!r} contains characters other than [%|a-zA-Z0-9_-]"
    elif len(topic) > _TOPIC_MAX_LENGTH_RETRY:
        reason = f"topic is {len(topic)} bytes long; at most {_TOPIC_MAX_LENGTH_RETRY} allowed"
    elif len(topic) > _TOPIC_MAX_LENGTH and not topic.startswith(_RETRY_PREFIX):
        reason = (
            f"topic is {len(topic)} bytes long; at most {_TOPIC_MAX_LENGTH} allowed "
            f"(up to {_TOPIC_MAX_LENGTH_RETRY} for {_RETRY_PREFIX} topics)"
        )
    else:
        reason = ""
    if len(_topic_checks) < 65536:
        _topic_checks[topic] = reason
    return reason


_buckets: dict[str, int] = {}


def order_properties(properties: Mapping[str, str]) -> list[str]:
    """Keys in the iteration order of a Java ``HashMap(128)`` holding them (5.x broker)."""
    if len(properties) > _JAVA_MAP_MAX_KEYS:
        return java_hashmap_order(properties, _JAVA_MAP_CAPACITY)
    buckets = _buckets
    for key in properties:
        if key not in buckets:
            h = java_string_hash(key) & 0xFFFFFFFF
            if len(buckets) > 65536:
                buckets.clear()
            buckets[key] = (h ^ (h >> 16)) & (_JAVA_MAP_CAPACITY - 1)
    return sorted(properties, key=buckets.__getitem__)


# A key set as given -> its values picked in Java's order and the text they fill. Bounded:
# emptied when full, and a shape of long keys is not kept (4096 of them could hold a client's
# megabytes), nor a key set encode_properties refuses.
_TEXT_SHAPES: dict[tuple[str, ...], tuple[Callable[[Any], Any], str]] = {}
_TEXT_SHAPE_KEPT_MAX = 1024


def properties_text(properties: Mapping[str, str]) -> str:
    """``encode_properties`` of ``properties`` in Java ``HashMap(128)`` order: each key set
    (a producer's sends repeat one) ordered and checked once, each message's values checked
    whole (``str``, non-empty, no ``\\x02``) and put in with one ``%``.

    Raises
    ------
    InvalidMessageError
        As ``encode_properties``.
    """
    given = tuple(properties)
    try:
        shape = _TEXT_SHAPES.get(given) or _text_shape(given)
    except TypeError:  # an unhashable key: encode_properties names it
        shape = None
    if shape is not None:
        pick, text = shape
        values = pick(properties)
        try:
            joined = "".join(values)
        except TypeError:
            joined = PROPERTY_SEPARATOR  # not all str: encode_properties names the first
        if PROPERTY_SEPARATOR not in joined and all(values):
            return text % values
    return encode_properties({key: properties[key] for key in order_properties(properties)})


def _text_shape(given: tuple[str, ...]) -> tuple[Callable[[Any], Any], str] | None:
    """The shape of a key set (see ``_TEXT_SHAPES``), remembered if short; ``None``: a key
    ``encode_properties`` refuses."""
    separators = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)
    if not given or not all(
        type(key) is str and key and not any(sep in key for sep in separators) for key in given
    ):
        return None
    order = order_properties(dict.fromkeys(given, ""))
    picked = itemgetter(*order) if len(order) > 1 else lambda props: (props[order[0]],)
    fields = (f"{key.replace('%', '%%')}{NAME_VALUE_SEPARATOR}%s" for key in order)
    shape = (picked, PROPERTY_SEPARATOR.join(fields) + PROPERTY_SEPARATOR)
    if len(shape[1]) <= _TEXT_SHAPE_KEPT_MAX:  # longer: made up per message, maybe
        if len(_TEXT_SHAPES) >= 4096:
            _TEXT_SHAPES.clear()
        _TEXT_SHAPES[given] = shape
    return shape


def rewrite_delay(
    properties: dict[str, str], topic: str, queue_id: int, level: int, max_level: int
) -> tuple[str, int]:
    """Turn a delayed message into a schedule-topic message, in place (docs/DELAY.md).

    Clamps DELAY to ``max_level``, records REAL_TOPIC/REAL_QID, drops the 5.x timer
    properties (the delay level wins) and returns ``(SCHEDULE_TOPIC_XXXX, level - 1)``.
    """
    if level > max_level:
        level = max_level
        properties[DELAY] = str(level)
    for key in (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS):
        properties.pop(key, None)
    properties[REAL_TOPIC] = topic
    properties[REAL_QID] = str(queue_id)
    return RMQ_SYS_SCHEDULE_TOPIC, level - 1


class PutContext(NamedTuple):
    """Per-store settings ``prepare`` needs."""

    max_body_bytes: int
    max_delay_level: int
    store_host: HostAddress
    new_uniq_key: Callable[[], str]
    record_crc: bool = True  # reserve the record CRC property (sealed under the put lock)


def prepare(request: PutRequest, ctx: PutContext, now_ms: int) -> PreparedMessage | PutResult:
    """Validate and pre-encode ``request`` (outside the put lock).

    Returns a ``PreparedMessage``, or a ``PutResult`` with MESSAGE_ILLEGAL or
    PROPERTIES_SIZE_EXCEEDED saying why the message cannot be stored.
    """
    topic = request.topic
    reason = _topic_checks.get(topic) if type(topic) is str else None
    if reason is None:
        reason = check_topic(topic)
    if reason:
        return _illegal(reason)
    queue_id = request.queue_id
    if type(queue_id) is not int or queue_id < 0:
        return _illegal(f"queue id must be >= 0, got {queue_id!r}")
    body = request.body
    if type(body) is not bytes and not isinstance(body, bytearray | memoryview):
        return _illegal(f"body must be bytes, got {type(body).__name__}")
    if len(body) > ctx.max_body_bytes:
        return _illegal(
            f"body is {len(body)} bytes; max_message_size_bytes is {ctx.max_body_bytes}"
        )
    if type(request.sys_flag) is not int:
        return _illegal(f"sys_flag must be an int, got {request.sys_flag!r}")
    tx_type = request.sys_flag & TRANSACTION_MASK
    consumes = tx_type == TRANSACTION_NOT_TYPE or tx_type == TRANSACTION_COMMIT_TYPE
    raw = request.raw_properties
    if raw is not None:
        if request.properties or request.tags or request.keys:
            return _illegal("raw_properties excludes properties, tags and keys")
        props_text = raw
        uniq_key = find_uniq_key(raw)
    elif not request.properties:
        # The common case: only UNIQ_KEY, TAGS and KEYS; their order is known in advance.
        uniq_key = ctx.new_uniq_key()
        simple = _simple_properties(uniq_key, request.tags, request.keys)
        if simple is None:
            return _illegal("TAGS and KEYS must not contain \\x01 or \\x02")
        props_text = simple
    else:
        props = dict(request.properties)
        if request.tags:
            props[TAGS] = request.tags
        if request.keys:
            props[KEYS] = _keys_text(request.keys)
        uniq_key = props.get(UNIQ_KEY)
        if not uniq_key:
            uniq_key = props[UNIQ_KEY] = ctx.new_uniq_key()
        if DELAY in props and consumes:
            try:
                level = delay_level_of(props)
            except ValueError as err:
                return _illegal(str(err))
            if level > 0:
                topic, queue_id = rewrite_delay(props, topic, queue_id, level, ctx.max_delay_level)
        try:
            props_text = properties_text(props)
        except InvalidMessageError as err:
            return _illegal(str(err))
    try:
        props_data = props_text.encode("utf-8")
    except UnicodeEncodeError as err:
        return _illegal(f"properties: not encodable as UTF-8: {err}")
    props_data = without_record_crc(props_data)  # a copy's stale record CRC
    if ctx.record_crc:
        props_data = with_record_crc(props_data)
    if len(props_data) > MAX_PROPERTIES_SIZE_BYTES:
        return _illegal(
            f"properties are {len(props_data)} bytes; at most {MAX_PROPERTIES_SIZE_BYTES} allowed",
            PutStatus.PROPERTIES_SIZE_EXCEEDED,
        )
    born = request.born_timestamp_ms
    buf = encode_ipv4_v1(
        topic,
        body,
        props_data,
        queue_id,
        request.flag,
        request.sys_flag,
        now_ms if born is None else born,
        request.born_host,
        now_ms,
        ctx.store_host,
        request.reconsume_times,
        request.prepared_transaction_offset,
    )
    if buf is None:  # IPv6, a v2 topic or a field out of range: the codec's general path
        record = MessageRecord(
            topic,
            body,
            props_data.decode("utf-8"),  # with the record CRC reserved, if it is
            queue_id,
            request.flag,
            0,
            0,
            request.sys_flag,
            now_ms if born is None else born,
            request.born_host,
            now_ms,
            ctx.store_host,
            request.reconsume_times,
            request.prepared_transaction_offset,
        )
        try:
            buf = encode_record_mutable(record)
        except InvalidMessageError as err:
            return _illegal(str(err))
    if len(buf) > ctx.max_body_bytes + MAX_RECORD_OVERHEAD_BYTES:
        return _illegal(f"record is {len(buf)} bytes; too large for max_message_size_bytes")
    return PreparedMessage(
        buf,
        topic,
        queue_id,
        consumes,
        uniq_key,
        _STORE_TS_POSITIONS[buf[39] & 0x10],  # BORNHOST_V6 sits in SYSFLAG's low byte
        request.idempotent,
        props_text,
        request.sys_flag,
    )


_STORE_TS_POSITIONS = {0: store_timestamp_position(0), 0x10: store_timestamp_position(0x10)}
_simple_orders: dict[tuple[bool, bool], tuple[str, ...]] = {}


def _keys_text(keys: tuple[str, ...] | str) -> str:
    """The KEYS property of ``PutRequest.keys``: a str as it is (RocketMQ's
    ``Message.setKeys(String)``), never joined letter by letter."""
    return keys if isinstance(keys, str) else " ".join(keys)


def _simple_properties(uniq_key: str, tags: str | None, keys: tuple[str, ...] | str) -> str | None:
    """UNIQ_KEY, TAGS and KEYS in Java ``HashMap(128)`` order, or ``None`` if a value holds a
    separator."""
    if not tags and not keys:
        return f"{UNIQ_KEY}\x01{uniq_key}\x02"  # a generated key holds no separator
    values = {UNIQ_KEY: uniq_key}
    if tags:
        values[TAGS] = tags
    if keys:
        values[KEYS] = _keys_text(keys)
    shape = (bool(tags), bool(keys))
    order = _simple_orders.get(shape)
    if order is None:
        order = _simple_orders[shape] = tuple(order_properties(values))
    parts = []
    for key in order:
        value = values[key]
        if "\x02" in value or not value:
            return None
        parts.append(f"{key}\x01{value}\x02")
    return "".join(parts)


def find_uniq_key(props_text: str) -> str | None:
    """UNIQ_KEY of a stored properties string, without parsing all of it."""
    start = 0
    marker = UNIQ_KEY + "\x01"
    while True:
        at = props_text.find(marker, start)
        if at < 0:
            return None
        if at == 0 or props_text[at - 1] == "\x02":
            end = props_text.find("\x02", at)
            value = props_text[at + len(marker) : end if end >= 0 else len(props_text)]
            return value or None
        start = at + 1
