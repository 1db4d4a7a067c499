"""PURE: the rows of the reput tables, derived from decoded source rows in Arrow.

Owns how a batch of ``rocketmq`` source rows (``schema.ARROW_SCHEMA``) becomes rows of
``consume_queue`` (RocketMQ ``CommitLogDispatcherBuildConsumeQueue``, docs/FORMAT.md 6) and
``message_index`` (RocketMQ ``IndexService``), and the vectorised Java ``String.hashCode`` they
need (``store/hashing.py`` is the one-string reference; a test checks they agree). Runs on
executors next to the decoder, so no row ever becomes a Python object or a JVM row. Does not
own table schemas or files (``tables.py``, ``delta_files.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.store.cq_rule import DISPATCHED_TRANSACTION_TYPES, SPECIAL_TOPICS, special_tags_code
from rmq_spark.store.hashing import java_string_hash
from rmq_spark.store.layout import TRANSACTION_MASK, TRANSACTION_ROLLBACK_TYPE

__all__ = [
    "CONSUME_QUEUE_SCHEMA",
    "MESSAGE_INDEX_SCHEMA",
    "consume_queue_rows",
    "java_hash_codes",
    "map_value",
    "message_index_rows",
]

_TIMESTAMP = pa.timestamp("us", tz="UTC")
CONSUME_QUEUE_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), False),
        pa.field("queue_id", pa.int32(), False),
        pa.field("queue_offset", pa.int64(), False),
        pa.field("physical_offset", pa.int64(), False),
        pa.field("total_size", pa.int32(), False),
        pa.field("tags_code", pa.int64(), False),
        pa.field("store_timestamp", _TIMESTAMP, False),
    ]
)
MESSAGE_INDEX_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), False),
        pa.field("key", pa.string(), False),
        pa.field("key_type", pa.string(), False),
        pa.field("key_hash", pa.int32(), False),
        pa.field("physical_offset", pa.int64(), False),
        pa.field("store_timestamp", _TIMESTAMP, False),
    ]
)
_INT_MIN = -(1 << 31)
# The source columns each table's rows are made of (``_special_codes`` reads properties).
_CQ_SOURCE_COLUMNS = (
    *(name for name in CONSUME_QUEUE_SCHEMA.names if name != "tags_code"),
    "tags",
    "properties",
)
_INDEX_SOURCE_COLUMNS = ("topic", "uniq_key", "keys", "physical_offset", "store_timestamp")


def _string_parts(strings: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(UTF-8 bytes, start of each string, end of each string) of a string array."""
    strings = strings.cast(pa.large_string()) if strings.type != pa.large_string() else strings
    _, offsets_buf, data_buf = strings.buffers()
    count = len(strings)
    first = strings.offset
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[first : first + count + 1]
    if data_buf is None:
        return np.zeros(0, np.uint8), offsets[:-1], offsets[1:]
    data = np.frombuffer(data_buf, dtype=np.uint8)
    return data, offsets[:-1], offsets[1:]


def java_hash_codes(strings: pa.Array) -> np.ndarray:
    """Java ``String.hashCode()`` of every string, as int32 (0 for null and for "").

    ASCII strings, the usual case, are hashed in numpy: Horner's rule over the character
    positions of the strings of each length, one gather of a byte per string per position,
    in place (uint32 arithmetic wraps like Java's int); a string with any other character
    goes through the reference (``java_string_hash``, UTF-16 units).
    """
    count = len(strings)
    hashed = np.zeros(count, dtype=np.uint32)
    data, starts, ends = _string_parts(strings)
    lengths = ends - starts
    wide = np.zeros(count, dtype=bool)
    for length in np.unique(lengths[lengths > 0]):
        rows = np.flatnonzero(lengths == length)
        first = starts[rows]
        h = np.zeros(len(rows), dtype=np.uint32)
        seen = np.zeros(len(rows), dtype=np.uint8)  # OR of the bytes: >= 0x80 is not ASCII
        for position in range(int(length)):
            byte = data[first + position]
            np.multiply(h, np.uint32(31), out=h)
            np.add(h, byte, out=h, casting="unsafe")
            np.bitwise_or(seen, byte, out=seen)
        wide[rows] = seen >= 0x80
        hashed[rows] = h
    result = hashed.view(np.int32)
    for row in np.flatnonzero(wide):
        result[row] = java_string_hash(strings[int(row)].as_py())
    if strings.null_count:
        result[np.asarray(strings.is_null())] = 0
    return result


def map_value(maps: pa.Array, key: str) -> pa.Array:
    """Per row, the value of ``key`` in a ``map<string, string>`` array (its first entry;
    null where absent)."""
    count = len(maps)
    if count == 0:
        return pa.nulls(0, pa.string())
    if maps.offset:  # .keys and .items are the unsliced children
        maps = maps.take(pa.array(np.arange(count)))
    keys, items = maps.keys, maps.items
    hits = np.flatnonzero(np.asarray(pc.equal(keys, key).fill_null(False)))
    if len(hits) == 0:
        return pa.nulls(count, pa.string())
    offsets = np.asarray(maps.offsets)  # (list_parent_indices aborts on a map array)
    parents = np.repeat(np.arange(count), np.diff(offsets))[hits - offsets[0]]
    rows, first = np.unique(parents, return_index=True)
    take = np.full(count, -1, dtype=np.int64)
    take[rows] = hits[first]
    mask = take < 0
    return items.take(pa.array(np.where(mask, 0, take), mask=mask))


def _transaction_bits(rows: pa.Table) -> np.ndarray:
    return np.asarray(rows.column("sys_flag")) & TRANSACTION_MASK


def _rows_where(rows: pa.Table, keep: np.ndarray, columns: Sequence[str]) -> pa.Table:
    """``columns`` of the rows where ``keep``: only the columns a table's rows need are
    filtered (never the bodies), and nothing is copied when every row is kept (the usual
    case: messages that are not transactional)."""
    picked = rows.select(columns)
    return picked if bool(keep.all()) else picked.filter(pa.array(keep))


def _special_codes(
    rows: pa.Table, codes: np.ndarray, store_ms: np.ndarray, delay_levels_ms: Sequence[int]
) -> None:
    """Delivery times in place of the TAGS hash for the schedule and the timer topic's rows:
    ``cq_rule.special_tags_code`` of each (the broker's own rule; these rows are few)."""
    topic = rows.column("topic")
    levels = tuple(delay_levels_ms)
    for name in SPECIAL_TOPICS:
        where = np.flatnonzero(np.asarray(pc.equal(topic, name)))
        if len(where) == 0:
            continue
        props = rows.column("properties").take(pa.array(where)).to_pylist()
        for row, items in zip(where, props, strict=True):
            parsed = dict(items or ())
            code = special_tags_code(name, parsed, int(store_ms[row]), levels)
            if code is not None:
                codes[row] = code


def consume_queue_rows(rows: pa.Table, delay_levels_ms: Sequence[int]) -> pa.Table:
    """ConsumeQueue rows (``CONSUME_QUEUE_SCHEMA``) of source rows, by ``store/cq_rule.py``:
    transaction type NOT or COMMIT only (``DISPATCHED_TRANSACTION_TYPES``); ``tags_code``
    the Java hash of TAGS (0 when absent), or for ``SCHEDULE_TOPIC_XXXX`` and
    ``rmq_sys_wheel_timer`` what ``special_tags_code`` says (docs/TABLES.md).
    """
    dispatched = _rows_where(
        rows, np.isin(_transaction_bits(rows), DISPATCHED_TRANSACTION_TYPES), _CQ_SOURCE_COLUMNS
    )
    tags = dispatched.column("tags").combine_chunks()
    codes = java_hash_codes(tags).astype(np.int64)
    stamps = dispatched.column("store_timestamp")
    store_ms = np.asarray(stamps.cast(pa.int64())) // 1000 if len(stamps) else np.zeros(0, np.int64)
    _special_codes(dispatched, codes, store_ms, delay_levels_ms)
    columns = [
        pa.array(codes, pa.int64()) if name == "tags_code" else dispatched.column(name)
        for name in CONSUME_QUEUE_SCHEMA.names
    ]
    return pa.Table.from_arrays(columns, schema=CONSUME_QUEUE_SCHEMA)


def message_index_rows(rows: pa.Table) -> pa.Table:
    """IndexFile rows (``MESSAGE_INDEX_SCHEMA``): one per UNIQ_KEY and per KEYS token of each
    message that is not a ROLLBACK. ``key_hash`` is ``abs(hashCode(topic + "#" + key))``, 0
    when the hash is Integer.MIN_VALUE (RocketMQ ``IndexService``)."""
    eligible = _rows_where(
        rows, _transaction_bits(rows) != TRANSACTION_ROLLBACK_TYPE, _INDEX_SOURCE_COLUMNS
    )
    uniq_rows = np.flatnonzero(np.asarray(eligible.column("uniq_key").is_valid()))
    keys = eligible.column("keys").combine_chunks()
    key_rows = np.asarray(pc.list_parent_indices(keys), dtype=np.int64)
    source_rows = np.concatenate([uniq_rows, key_rows])
    key = pa.concat_arrays(
        [
            eligible.column("uniq_key").combine_chunks().take(pa.array(uniq_rows)),
            pc.list_flatten(keys),
        ]
    )
    kinds = np.concatenate([np.zeros(len(uniq_rows), np.int8), np.ones(len(key_rows), np.int8)])
    key_type = pa.DictionaryArray.from_arrays(pa.array(kinds), ["UNIQ_KEY", "KEYS"])
    picked = pa.array(source_rows, pa.int64())
    topic = eligible.column("topic").combine_chunks().take(picked)
    code = java_hash_codes(pc.binary_join_element_wise(topic, key, "#")).astype(np.int64)
    key_hash = np.where(code == _INT_MIN, 0, np.abs(code)).astype(np.int32)
    columns = {
        "topic": topic,
        "key": key,
        "key_type": key_type.cast(pa.string()),
        "key_hash": pa.array(key_hash),
        "physical_offset": eligible.column("physical_offset").combine_chunks().take(picked),
        "store_timestamp": eligible.column("store_timestamp").combine_chunks().take(picked),
    }
    return pa.Table.from_arrays(
        [columns[name] for name in MESSAGE_INDEX_SCHEMA.names], schema=MESSAGE_INDEX_SCHEMA
    )
