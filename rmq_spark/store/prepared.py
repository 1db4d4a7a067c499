"""PURE: the general put path's batches: all-or-nothing validity, idempotent repeats,
pre-encoded records completed under the lock, and their results.

The appender (``appender.py``) holds the lock and the segment; this module decides what a
batch of ``put.PreparedMessage`` writes and answers: ``reject_batch`` (one illegal message
sinks the batch), ``duplicates_in`` (idempotent repeats of the window or of the batch),
``complete`` (offsets, store timestamp and record CRC patched into the records' bytes) and
``prepared_results``.
"""

from __future__ import annotations

import struct

from rmq_spark.store.codec import OFFSETS, QUEUE_OFFSET_POSITION
from rmq_spark.store.cq_facts import BatchFact
from rmq_spark.store.put import PreparedMessage, PutResult, PutStatus
from rmq_spark.store.put_state import IdempotencyWindow, WindowEntry
from rmq_spark.store.record_crc import seal_record

__all__ = [
    "complete",
    "duplicate_result",
    "duplicates_in",
    "facts_of",
    "prepared_results",
    "reject_batch",
    "remember",
]

_pack_offsets = OFFSETS.pack_into
_pack_i64 = struct.Struct(">q").pack_into


def reject_batch(prepared: list[PreparedMessage | PutResult]) -> list[PutResult] | None:
    """All or nothing: the results of a batch holding an illegal message, else ``None``.

    The illegal messages keep their own result; the others say which message sank the batch.
    """
    bad = [(index, p) for index, p in enumerate(prepared) if type(p) is PutResult]
    if not bad:
        return None
    first_index, first = bad[0]
    assert isinstance(first, PutResult)
    detail = f"batch rejected: message #{first_index} is illegal: {first.detail}"
    return [
        item if isinstance(item, PutResult) else PutResult(first.status, detail=detail)
        for item in prepared
    ]


def duplicates_in(
    messages: list[PreparedMessage], window: IdempotencyWindow
) -> dict[int, WindowEntry | PreparedMessage]:
    """Idempotent messages of a batch not to write, by ``id()``: the stored entry they
    repeat, or the earlier message of the same batch with the same (topic, UNIQ_KEY)."""
    found: dict[int, WindowEntry | PreparedMessage] = {}
    first: dict[tuple[str, str], PreparedMessage] = {}
    for message in messages:
        if message.uniq_key is None:
            continue
        key = (message.topic, message.uniq_key)
        if message.idempotent:
            entry = window.get(*key)
            if entry is not None:
                found[id(message)] = entry
                continue
            if key in first:
                found[id(message)] = first[key]
                continue
        first.setdefault(key, message)
    return found


def complete(
    writes: list[PreparedMessage],
    base: int,
    now: int,
    queue_offsets: dict[tuple[str, int], int],
    seal: bool,
) -> tuple[bytearray, dict[int, tuple[int, int]], dict[tuple[str, int], int]]:
    """The records of ``writes`` placed from physical offset ``base``: their bytes with
    offsets, store timestamp ``now`` and (``seal``) record CRC filled in, where each went
    (physical and queue offset, by ``id()``), and the next queue offset of each queue."""
    buf = writes[0].buf if len(writes) == 1 else bytearray().join(m.buf for m in writes)
    pending: dict[tuple[str, int], int] = {}
    placed: dict[int, tuple[int, int]] = {}
    position = 0
    for message in writes:
        if message.consumes_queue_offset:
            key = (message.topic, message.queue_id)
            queue_offset = pending.get(key)
            if queue_offset is None:
                queue_offset = queue_offsets.get(key, 0)
            pending[key] = queue_offset + 1
        else:
            queue_offset = 0
        _pack_offsets(buf, position + QUEUE_OFFSET_POSITION, queue_offset, base + position)
        _pack_i64(buf, position + message.timestamp_position, now)
        if seal:
            seal_record(buf, position, message.size)
        placed[id(message)] = (base + position, queue_offset)
        position += message.size
    return buf, placed, pending


def facts_of(
    writes: list[PreparedMessage], placed: dict[int, tuple[int, int]], now: int
) -> BatchFact:
    """The ConsumeQueue facts of written records (``cq_facts.BatchFact``)."""
    where = [placed[id(message)] for message in writes]
    return (
        [physical_offset for physical_offset, _ in where],
        [message.size for message in writes],
        [message.topic for message in writes],
        [message.queue_id for message in writes],
        [queue_offset for _, queue_offset in where],
        [message.sys_flag for message in writes],
        None,
        [message.properties for message in writes],
        now,
        None,
    )


def remember(
    window: IdempotencyWindow,
    writes: list[PreparedMessage],
    placed: dict[int, tuple[int, int]],
    now: int,
) -> None:
    """Add the written records that carry a UNIQ_KEY to the window."""
    for message in writes:
        if message.uniq_key is not None:
            physical_offset, queue_offset = placed[id(message)]
            window.add(
                message.topic,
                message.uniq_key,
                (physical_offset, message.size, queue_offset, message.queue_id, now),
            )


def prepared_results(
    messages: list[PreparedMessage],
    copies: dict[int, WindowEntry | PreparedMessage],
    placed: dict[int, tuple[int, int]],
    prefix: str,
    now: int,
) -> tuple[list[PutResult], int]:
    """The results of a written batch (repeats answered with the first copy) and the end
    offset an fsync must cover."""
    results = []
    end = 0
    for message in messages:
        copy_of = copies.get(id(message)) if copies else None
        if isinstance(copy_of, WindowEntry):
            results.append(duplicate_result(message, copy_of, prefix))
            end = max(end, copy_of.physical_offset + copy_of.total_size)
            continue
        physical_offset, queue_offset = placed[id(copy_of or message)]
        end = max(end, physical_offset + message.size)
        results.append(
            PutResult(
                PutStatus.PUT_OK,
                physical_offset,
                queue_offset,
                prefix + format(physical_offset, "016X"),
                message.topic,
                message.queue_id,
                now,
                message.uniq_key,
                message.size,
                duplicate=copy_of is not None,
            )  # fmt: skip
        )
    return results, end


def duplicate_result(message: PreparedMessage, entry: WindowEntry, prefix: str) -> PutResult:
    """The result of an idempotent repeat: the first copy's (durable once it is)."""
    return PutResult(
        PutStatus.PUT_OK,
        entry.physical_offset,
        entry.queue_offset,
        prefix + format(entry.physical_offset, "016X"),
        message.topic,
        entry.queue_id,
        entry.store_timestamp_ms,
        message.uniq_key,
        entry.total_size,
        duplicate=True,
    )
