"""PURE: Arrow record batches of the sink's input -> ``SinkMessage`` values, one per row.

Owns each row's UNIQ_KEY (derived from the write, the batch, the Spark partition and the
row's position in the partition, or taken from the ``keyColumn``) and the per-row checks the
sink makes before anything is sent (null topic or body, a delay level out of range, a delay
level beside a message group or a delivery time). The broker's own checks (tag, keys,
properties, sizes) stay the broker's: ``sink_targets.py`` reports its refusals per row.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.errors import SinkRowError

__all__ = ["SinkMessage", "derived_key", "key_prefix", "messages_of"]

_KEY_LENGTH_MAX = 128  # the broker's message id limit (UNIQ_KEY)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PER_MS = {"ms": 1, "us": 1000, "ns": 1_000_000}  # timestamp units per millisecond


@dataclass(frozen=True, slots=True)
class SinkMessage:
    """One row to store: what a producer would send, with its UNIQ_KEY as the message id."""

    row: int  # position in the Spark partition (0-based)
    uniq_key: str
    topic: str
    body: bytes
    tag: str | None = None
    keys: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    message_group: str | None = None
    delivery_ms: int | None = None
    delay_level: int | None = None


def key_prefix(write_id: str, batch_id: int) -> str:
    """The part of derived UNIQ_KEYs shared by one (write, micro-batch)."""
    return f"{write_id}-{batch_id}"


def derived_key(prefix: str, partition: int, row: int) -> str:
    """The UNIQ_KEY of row ``row`` of Spark partition ``partition``: the same on every
    attempt of the task and every replay of the batch (given the same input order)."""
    return f"{prefix}-{partition}-{row}"


def _column(batch: pa.RecordBatch, name: str) -> list[object] | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    array = batch.column(index)
    if pa.types.is_timestamp(array.type):
        unit = array.type.unit
        ticks = pc.cast(array, pa.int64()).to_pylist()
        if unit == "s":
            return [None if v is None else v * 1000 for v in ticks]
        return [None if v is None else v // _PER_MS[unit] for v in ticks]
    return array.to_pylist()  # type: ignore[no-any-return]


def messages_of(
    batch: pa.RecordBatch,
    *,
    partition: int,
    first_row: int,
    prefix: str,
    key_column: str = "",
    max_delay_level: int = 18,
) -> Iterator[SinkMessage]:
    """The rows of ``batch`` (rows ``first_row``... of the partition) as messages.

    Raises
    ------
    SinkRowError
        A row the sink cannot send; naming the partition, the row and its key.
    """
    columns = {name: _column(batch, name) for name in batch.schema.names}
    nones = [None] * batch.num_rows
    topics, bodies = columns["topic"], columns["body"]
    assert topics is not None and bodies is not None  # check_columns requires both
    tags = columns.get("tags") or nones
    keys = columns.get("keys") or nones
    props = columns.get("properties") or nones
    groups = columns.get("message_group") or nones
    times = columns.get("delivery_time") or nones
    levels = columns.get("delay_level") or nones
    user_keys = columns.get(key_column) if key_column else None
    for index in range(batch.num_rows):
        row = first_row + index
        key = derived_key(prefix, partition, row)
        if user_keys is not None:
            key = _user_key(user_keys[index], partition, row)

        def refuse(reason: str, row: int = row, key: str = key) -> SinkRowError:
            return SinkRowError(partition, row, key, reason)

        topic, body = topics[index], bodies[index]
        if not topic:
            raise refuse("topic is null or empty")
        if body is None:
            raise refuse("body is null")
        level = levels[index]
        if level is not None and not 1 <= int(str(level)) <= max_delay_level:
            raise refuse(f"delay_level {level} is outside 1..{max_delay_level}")
        if level is not None and (groups[index] is not None or times[index] is not None):
            raise refuse("delay_level cannot be combined with message_group or delivery_time")
        yield SinkMessage(
            row=row,
            uniq_key=key,
            topic=str(topic),
            body=body.encode("utf-8") if isinstance(body, str) else bytes(body),  # type: ignore[arg-type]
            tag=tags[index],  # type: ignore[arg-type]
            keys=_keys(keys[index]),
            properties=_properties(props[index]),
            message_group=groups[index],  # type: ignore[arg-type]
            delivery_ms=times[index],  # type: ignore[arg-type]
            delay_level=None if level is None else int(str(level)),
        )


def _keys(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split())
    return tuple(str(key) for key in value if key is not None)  # type: ignore[attr-defined]


def _properties(value: object) -> dict[str, str]:
    """A map column's value (Arrow gives (key, value) pairs); null values are dropped."""
    if value is None:
        return {}
    return {str(k): str(v) for k, v in value if v is not None}  # type: ignore[attr-defined]


def _user_key(value: object, partition: int, row: int) -> str:
    text = "" if value is None else str(value)
    if not text or len(text) > _KEY_LENGTH_MAX or _CONTROL.search(text):
        raise SinkRowError(
            partition,
            row,
            repr(value),
            f"the keyColumn value must be 1 to {_KEY_LENGTH_MAX} characters without "
            "control characters",
        )
    return text
