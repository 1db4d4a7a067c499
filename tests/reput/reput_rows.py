"""Helpers of the reput tests: source rows built by hand, and the table rows they must give.

``message`` builds one row of the ``rocketmq`` source's schema (what the reput job sees), so
table logic is tested without a store; expectations come from the PURE reference code
(``hashing.py``, ``delay_levels.py``), not from the Spark expressions under test.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rmq_spark.store.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_message_delay_level
from rmq_spark.store.hashing import index_key_hash, tags_code

LEVELS_MS = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)
_TX_NAMES = ("NOT", "PREPARED", "COMMIT", "ROLLBACK")


def message(
    physical_offset: int,
    *,
    topic: str = "TopicTest",
    queue_id: int = 0,
    queue_offset: int = 0,
    tags: str | None = None,
    keys: str | None = None,
    uniq_key: str | None = None,
    sys_flag: int = 0,
    store_ms: int = 1_700_000_000_000,
    extra: dict[str, str] | None = None,
    total_size: int = 100,
) -> dict[str, Any]:
    """One source row as a dict (the properties map built from tags/keys/uniq_key/extra)."""
    props: dict[str, str] = dict(extra or {})
    if tags is not None:
        props["TAGS"] = tags
    if keys is not None:
        props["KEYS"] = keys
    if uniq_key is not None:
        props["UNIQ_KEY"] = uniq_key
    stamp = datetime.fromtimestamp(store_ms / 1000, tz=UTC)
    delay = props.get("DELAY")
    return {
        "topic": topic,
        "queue_id": queue_id,
        "queue_offset": queue_offset,
        "physical_offset": physical_offset,
        "total_size": total_size,
        "body": b"body-%d" % physical_offset,
        "tags": tags,
        "keys": [k for k in (keys or "").split(" ") if k],
        "properties": props,
        "msg_id": f"{physical_offset:032X}",
        "uniq_key": uniq_key,
        "born_timestamp": stamp,
        "born_host": "127.0.0.1:5555",
        "store_timestamp": stamp,
        "store_host": "127.0.0.1:10911",
        "sys_flag": sys_flag,
        "flag": 0,
        "reconsume_times": 0,
        "prepared_transaction_offset": 0,
        "body_crc": 0,
        "transaction_type": _TX_NAMES[(sys_flag & 0xC) >> 2],
        "delay_level": int(delay) if delay is not None and delay.isdigit() else None,
    }


def expected_consume_queue(rows: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What RocketMQ's CQ dispatcher writes for these rows (spec 6.3, 6.4), as tuples."""
    out = []
    for row in rows:
        if row["sys_flag"] & 0xC not in (0x0, 0x8):
            continue
        props = row["properties"]
        store_ms = int(row["store_timestamp"].timestamp() * 1000)
        code = tags_code(row["tags"])
        if row["topic"] == "SCHEDULE_TOPIC_XXXX" and "DELAY" in props:
            level = min(int(props["DELAY"]), len(LEVELS_MS))
            if level > 0:
                code = store_ms + LEVELS_MS[level - 1]
        if row["topic"] == "rmq_sys_wheel_timer":
            for name in ("TIMER_OUT_MS", "TIMER_DELIVER_MS"):
                if name in props:
                    code = int(props[name])
                    break
        out.append(
            (
                row["topic"],
                row["queue_id"],
                row["queue_offset"],
                row["physical_offset"],
                row["total_size"],
                code,
                row["store_timestamp"],
            )
        )
    return out


def expected_index(rows: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What RocketMQ's IndexService indexes for these rows (spec 7.6), as tuples."""
    out = []
    for row in rows:
        if row["sys_flag"] & 0xC == 0xC:
            continue
        props = row["properties"]
        keys = []
        if "UNIQ_KEY" in props:
            keys.append((props["UNIQ_KEY"], "UNIQ_KEY"))
        keys += [(k, "KEYS") for k in props.get("KEYS", "").split(" ") if k]
        for key, kind in keys:
            out.append(
                (
                    row["topic"],
                    key,
                    kind,
                    index_key_hash(f"{row['topic']}#{key}"),
                    row["physical_offset"],
                    row["store_timestamp"],
                )
            )
    return out


def as_plain(values: Sequence[Any]) -> tuple[Any, ...]:
    """A row as a tuple with timestamps as epoch ms (Spark hands back naive local datetimes)."""
    return tuple(round(v.timestamp() * 1000) if isinstance(v, datetime) else v for v in values)


def plain_rows(rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Rows as sorted plain tuples, for order-free comparison."""
    return sorted((as_plain(row) for row in rows), key=repr)


def row_from_record(record: Any, total_size: int) -> dict[str, Any]:
    """A stored ``MessageRecord`` in the shape ``message()`` builds (for the expectations)."""
    from rmq_spark.store.properties import parse_properties

    props = parse_properties(record.properties)
    row = message(
        record.physical_offset,
        topic=record.topic,
        queue_id=record.queue_id,
        queue_offset=record.queue_offset,
        sys_flag=record.sys_flag,
        store_ms=record.store_timestamp_ms,
        total_size=total_size,
        extra=props,
    )
    row["tags"] = props.get("TAGS") or None
    return row


def row_from_dump(obj: dict[str, Any]) -> dict[str, Any]:
    """One ``rmq-spark dump`` JSON object in the shape ``message()`` builds."""
    props = dict(obj["properties"])
    row = message(
        obj["physical_offset"],
        topic=obj["topic"],
        queue_id=obj["queue_id"],
        queue_offset=obj["queue_offset"],
        sys_flag=obj["sys_flag"],
        store_ms=obj["store_timestamp"],
        total_size=obj["total_size"],
        extra=props,
    )
    row["tags"] = props.get("TAGS") or None
    return row


def put_batches(store_dir: Path, batches: Sequence[Sequence[Any]]) -> list[list[dict[str, Any]]]:
    """Put each batch of ``PutRequest`` into a real store at ``store_dir`` (created if new);
    returns the stored messages of each batch in the shape ``message()`` builds."""
    from rmq_spark.store.config import StoreConfig
    from rmq_spark.store.message_store import MessageStore

    stored: list[list[dict[str, Any]]] = []
    with MessageStore.open(StoreConfig(root_dir=store_dir, segment_size_bytes=1 << 20)) as store:
        for batch in batches:
            results = [store.put(request) for request in batch]
            stored.append(
                [
                    row_from_record(d.record, d.total_size)
                    for d in map(store.read_decoded, (r.physical_offset for r in results))
                ]
            )
    return stored


def log_range(rows: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """``[start, end)`` of consecutive stored messages in the log."""
    return rows[0]["physical_offset"], rows[-1]["physical_offset"] + rows[-1]["total_size"]
