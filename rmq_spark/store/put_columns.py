"""PURE: columnar puts: a batch given as columns (or an Arrow table), and its receipt.

Owns ``MessageColumns`` (topics, queue ids, bodies, TAGS, born timestamps and properties
of one batch, as a Spark sink holds them: sequences or one value for all), reading them from
a ``pyarrow`` table or record batch (``arrow_columns``), turning them into ``PutRequest``s for
the general path (``requests_of``), and ``PutBatchReceipt``, the columnar outcome of a
batch (no ``PutResult`` per message: building those costs a third of a small put).

Does not own validation or encoding (``put.py``, ``put_plan.py``, ``packed.py``): columns that
the packed path takes are written by it, anything else goes through ``put_batch``'s general
path, with the same checks, errors and bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rmq_spark.errors import InvalidMessageError
from rmq_spark.store.put import PutRequest, PutResult, PutStatus

__all__ = ["ARROW_FIELDS", "MessageColumns", "PutBatchReceipt", "arrow_columns", "requests_of"]

ARROW_FIELDS = ("topic", "body", "queue_id", "tags", "born_timestamp_ms", "properties")
"""The columns ``arrow_columns`` reads (``topic`` and ``body`` required, the rest optional)."""

_PUT_OK = PutStatus.PUT_OK


def _none_for_null(arrow_type: Any) -> bool:
    """Whether numpy keeps a null of this Arrow type as ``None`` (strings and binaries)."""
    return str(arrow_type) in {"string", "large_string", "binary", "large_binary"}


@dataclass(frozen=True, slots=True)
class MessageColumns:
    """One batch, column by column: entry ``i`` of every column is message ``i``.

    ``topics``, ``queue_ids`` and ``tags`` may be one value for every message; ``properties``
    entries are the producer's properties (``None`` or empty: none), ``born_timestamps_ms``
    entries ``None``: born at the store timestamp.
    """

    topics: Sequence[str]
    bodies: Sequence[bytes]
    queue_ids: Sequence[int]
    tags: Sequence[str | None]
    born_timestamps_ms: Sequence[int | None]
    properties: Sequence[Mapping[str, str] | None] | None

    @classmethod
    def of(
        cls,
        topic: str | Sequence[str],
        body: Sequence[bytes],
        queue_id: int | Sequence[int] = 0,
        tags: str | Sequence[str | None] | None = None,
        born_timestamp_ms: Sequence[int | None] | None = None,
        properties: Sequence[Mapping[str, str] | None] | None = None,
    ) -> MessageColumns:
        """The columns of ``len(body)`` messages; a scalar ``topic``, ``queue_id`` or
        ``tags`` is every message's. Raises ``InvalidMessageError`` naming a column whose
        length is not the number of bodies."""
        n = len(body)
        borns = born_timestamp_ms
        return cls(
            _column("topic", topic, n, str),
            body,
            _column("queue_id", queue_id, n, int),
            _column("tags", tags, n, str),
            [None] * n if borns is None else _sized("born_timestamp_ms", borns, n),
            None if properties is None else _sized("properties", properties, n),
        )

    @property
    def has_properties(self) -> bool:
        """Whether a message carries properties (the packed path takes none but TAGS)."""
        return self.properties is not None and any(self.properties)


def _sized(name: str, values: Sequence[Any], n: int) -> Sequence[Any]:
    if len(values) != n:
        raise InvalidMessageError(name, f"{len(values)} values for {n} bodies")
    return values


def _column(name: str, value: object, n: int, scalar: type) -> Sequence[Any]:
    """``value`` repeated ``n`` times if it is one value (``scalar`` or ``None``), else the
    sequence itself (checked for length)."""
    if value is None or isinstance(value, scalar) or not isinstance(value, Sequence):
        return [value] * n
    return _sized(name, value, n)


def requests_of(columns: MessageColumns) -> list[PutRequest]:
    """The ``PutRequest`` of every message (the general path of a columnar put)."""
    properties = columns.properties or [None] * len(columns.bodies)
    return [
        PutRequest(
            topic,
            body,
            queue_id,
            properties=props or None,
            tags=tags,
            born_timestamp_ms=born,
        )
        for topic, body, queue_id, tags, born, props in zip(
            columns.topics,
            columns.bodies,
            columns.queue_ids,
            columns.tags,
            columns.born_timestamps_ms,
            properties,
            strict=True,
        )
    ]


def arrow_columns(table: Any) -> MessageColumns:
    """The columns of a ``pyarrow.Table`` or ``RecordBatch`` with the ``ARROW_FIELDS``
    columns (``properties`` a map or a list of (key, value) structs). Raises
    ``InvalidMessageError`` for a missing ``topic`` or ``body`` column."""
    names = set(table.schema.names)
    for required in ("topic", "body"):
        if required not in names:
            raise InvalidMessageError(required, f"no {required!r} column in {sorted(names)}")

    def values(name: str) -> list[Any] | None:
        if name not in names:
            return None
        column = table.column(name)
        if column.null_count and not _none_for_null(column.type):
            return list(column.to_pylist())  # numpy would turn an int column's nulls into NaN
        # numpy's tolist makes the Python objects ~20x faster than Arrow's to_pylist.
        return list(column.to_numpy(zero_copy_only=False).tolist())

    properties = table.column("properties").to_pylist() if "properties" in names else None
    if properties is not None:
        properties = [None if entry is None else dict(entry) for entry in properties]
    queue_ids = values("queue_id")
    return MessageColumns.of(
        values("topic") or [],
        values("body") or [],
        0 if queue_ids is None else queue_ids,
        values("tags"),
        values("born_timestamp_ms"),
        properties,
    )


@dataclass(slots=True)
class PutBatchReceipt:
    """The outcome of a columnar put: one status for the batch (all or nothing, as
    ``put_batch``), and where each message went. ``detail`` says why when not ``PUT_OK``
    (then the lists are empty: nothing was stored, or, after a failed fsync, nothing is
    acknowledged)."""

    status: PutStatus
    physical_offsets: list[int] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    uniq_keys: list[str | None] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    store_timestamp_ms: int = 0
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status is _PUT_OK

    @property
    def end_offset(self) -> int:
        """Where the batch's records end (0 if none was written)."""
        if not self.physical_offsets:
            return 0
        return self.physical_offsets[-1] + self.sizes[-1]

    @classmethod
    def of_results(cls, results: list[PutResult]) -> PutBatchReceipt:
        """The receipt of ``put_batch``'s results (the general path)."""
        failed = [index for index, result in enumerate(results) if not result.ok]
        if not failed:
            return cls(
                _PUT_OK,
                [result.physical_offset for result in results],
                [result.queue_offset for result in results],
                [result.uniq_key for result in results],
                [result.total_size for result in results],
                max((result.store_timestamp_ms for result in results), default=0),
            )
        # The message that sank the batch keeps its own detail; the others name it.
        own = [index for index in failed if not results[index].detail.startswith("batch ")]
        index = (own or failed)[0]
        first = results[index]
        detail = first.detail
        if len(failed) > 1 and not detail.startswith("batch "):
            detail = f"batch rejected: message #{index} is illegal: {detail}"
        return cls(first.status, detail=detail)
