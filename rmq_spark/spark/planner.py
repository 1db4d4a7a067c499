"""Driver-side questions about a store's log: where it ends, where a batch may end, where a
timestamp starts, how much is behind. Reads headers only (TOTALSIZE hops and a few fields),
never bodies, and never whole segments except to find the end of a store no broker has open.

Owns the fast path of the readable end (a vectorised walk over record headers; the rule
and the judgement at the tail are ``store/scan.py``'s), admission control (a batch end at a
record boundary under a byte and a message budget), ``startingTimestamp`` search,
starting-offset validation and backlog counting. Does not own offsets' shape or
partitioning (``offsets.py``), decoding rows (``columnar.py``) or Spark (``source.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from rmq_spark.errors import CorruptRecordError, SourceError
from rmq_spark.spark.arrow_views import gather_rows
from rmq_spark.spark.record_starts import hop, is_record_start, sync_forward
from rmq_spark.store import readable
from rmq_spark.store.layout import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2
from rmq_spark.store.readable import TailCache
from rmq_spark.store.record_layout import (
    HEADER_FIELDS,
    HOST_FLAGS_BYTE,
    HOST_FLAGS_SHIFT,
    MAGIC_POSITION,
    PHYSICAL_OFFSET_POSITION,
)
from rmq_spark.store.view import MappedSegment, SegmentSpan, StoreView

__all__ = [
    "Backlog",
    "Lag",
    "TailCache",
    "advance",
    "backlog",
    "check_boundary",
    "count_records",
    "first_store_time",
    "lag",
    "offset_for_timestamp",
    "readable_end",
    "store_time_at",
    "walk_headers",
]

_MESSAGE_MAGICS = np.array([MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2], dtype=np.uint32)
_HOP_RECORDS = 1 << 16
_STORE_TS_AT = np.array([fields["store_ts"][0] for fields in HEADER_FIELDS])  # by host kind
_BODY_SIZE_AT = np.array([fields["body_size"][0] for fields in HEADER_FIELDS])
_HOP_BYTES = 1 << 40  # no byte cap: the driver hops headers only


def _units(
    view: StoreView, start: int, end: int, chunk_records: int = _HOP_RECORDS
) -> Iterator[tuple[SegmentSpan, object, np.ndarray, bool]]:
    """Walk ``[start, end)``: chunks of (span, buffer, record starts as offsets, is_blank).

    A segment's BLANK record comes as a one-element chunk with ``is_blank`` set, standing for
    the jump to the next segment. Parts no listed segment covers are skipped. A chunk holds
    at most ``chunk_records`` starts (callers that stop early pass a small one).

    Raises
    ------
    CorruptRecordError
        A header that is neither a record, a BLANK nor the end of the readable range.
    """
    for span in view.spans:
        if span.end_offset <= start or span.base_offset >= end:
            continue
        try:
            mapped = MappedSegment(view.segment_path(span.base_offset))
        except FileNotFoundError:
            continue  # deleted since listing: the caller's data-loss check reports it
        with mapped:
            buf = mapped.buffer
            size = min(mapped.size_bytes, span.size_bytes)
            limit = min(size, end - span.base_offset)
            pos = max(start, span.base_offset) - span.base_offset
            data = np.frombuffer(buf, dtype=np.uint8)
            while pos < limit:
                starts, after = hop(buf, pos, limit, limit, chunk_records, _HOP_BYTES)
                found = np.frombuffer(starts, dtype=np.int64) if len(starts) else np.zeros(0, int)
                magics = gather_rows(data, found + 4, 4).view(">u4").reshape(-1)
                blanks = np.flatnonzero(magics == BLANK_MAGIC_CODE)
                if len(blanks):
                    found = found[: blanks[0]]
                if len(found):
                    yield span, buf, found + span.base_offset, False
                if len(blanks):
                    yield span, buf, np.array([span.end_offset]), True
                    break
                if len(starts) >= chunk_records:
                    pos = after
                    continue
                if after >= limit:
                    break
                if limit - after >= 8 and int.from_bytes(buf[after + 4 : after + 8], "big") == (
                    BLANK_MAGIC_CODE
                ):
                    yield span, buf, np.array([span.end_offset]), True
                    break
                readable_end_offset = span.base_offset + limit
                raise CorruptRecordError(
                    str(view.segment_path(span.base_offset)),
                    after,
                    f"no valid record where one must start (readable end {readable_end_offset})",
                )


def _record_ends(buf: object, base: int, starts: np.ndarray) -> np.ndarray:
    data = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    sizes = gather_rows(data, starts - base, 4).view(">i4").reshape(-1).astype(np.int64)
    return starts + sizes


def advance(
    view: StoreView,
    start: int,
    end: int,
    *,
    records_max: int = 0,
    bytes_max: int = 0,
    topics: tuple[str, ...] = (),
    topic_pattern: str = "",
) -> int:
    """The batch end for admission control: the furthest record boundary in ``(start, end]``
    within ``bytes_max`` bytes and ``records_max`` messages from ``start`` (0 = no limit).

    At least one message is admitted even if it alone exceeds ``bytes_max``, so a query
    always makes progress. A BLANK tail counts as bytes but not as a message. With a topic
    filter only messages of the subscribed topics count against ``records_max`` (bytes are
    log bytes: what the batch reads).
    """
    if start >= end:
        return start
    if not records_max and (not bytes_max or end - start <= bytes_max):
        return end  # the readable end is a boundary: nothing to count, no header to read
    budget_end = start + bytes_max if bytes_max else end
    walk_from = start
    if not records_max:  # segment starts are boundaries: walk the segment the budget ends in
        inside = [s.base_offset for s in view.spans if start < s.base_offset <= budget_end]
        walk_from = max(inside, default=start)
        if walk_from == budget_end:
            return walk_from
    count = 0  # messages counted against records_max
    admitted = 0 if walk_from == start else 1  # of any topic (whole segments count as some)
    best = walk_from
    for span, buf, starts, is_blank in _units(view, walk_from, end):
        ends = starts if is_blank else _record_ends(buf, span.base_offset, starts)
        take = int(np.searchsorted(ends, budget_end, side="right"))
        counted = np.ones(len(ends), dtype=np.int64)
        if not is_blank and records_max and (topics or topic_pattern):
            counted = _subscribed(buf, span.base_offset, starts, topics, topic_pattern)[0]
        if not is_blank and records_max:
            running = np.cumsum(counted)
            reach = int(np.searchsorted(running, records_max - count, side="left")) + 1
            take = min(take, reach)
        if take == 0:
            if admitted == 0:  # nothing admitted yet: take one unit to make progress
                best = int(ends[0])
                if is_blank:
                    continue
                return best
            return best
        best = int(ends[take - 1])
        if not is_blank:
            count += int(counted[:take].sum())
            admitted += take
        if take < len(ends) or (records_max and count >= records_max):
            return best
    return end


def count_records(view: StoreView, start: int, end: int, records_max: int) -> tuple[int, bool]:
    """Messages in ``[start, end)``, counting at most ``records_max``: (count, exact)."""
    found = backlog(view, start, end, records_max)
    return (found.messages, True) if found.exact else (records_max, False)


@dataclass(frozen=True)
class Backlog:
    """What lies in ``[start, end)`` of the log: bytes, and messages counted or estimated."""

    bytes: int
    messages: int
    exact: bool  # False: ``messages`` extrapolates the first ``records_max`` messages' sizes


def backlog(view: StoreView, start: int, end: int, records_max: int) -> Backlog:
    """Bytes and messages in ``[start, end)``; headers of at most ``records_max + 1`` messages
    are read (TOTALSIZE hops, ~0.2 us each), so the cost is bounded whatever the backlog.

    Past ``records_max`` messages the count is an estimate: ``records_max`` times the bytes
    left over the bytes those messages spanned (BLANK tails count as bytes).
    """
    total = max(0, end - start)
    count = 0
    chunk = max(1, min(_HOP_RECORDS, records_max + 1))
    for _, _, starts, is_blank in _units(view, start, end, chunk):
        if is_blank:
            continue
        if count + len(starts) > records_max:
            spanned = int(starts[records_max - count]) - start  # start of the first uncounted
            estimate = round(records_max * total / max(1, spanned))
            return Backlog(total, max(estimate, records_max + 1), False)
        count += len(starts)
    return Backlog(total, count, True)


@dataclass(frozen=True)
class Lag:
    """The unread messages of the subscribed topics in ``[start, end)`` of the log."""

    messages: int
    bytes: int  # their TOTALSIZEs (no topic filter: the log bytes, BLANK tails included)
    exact: bool  # False: counted over the first ``records_max`` records, then extrapolated
    oldest_store_ms: int  # store time of the first of them; -1 when there is none


def lag(
    view: StoreView,
    start: int,
    end: int,
    records_max: int,
    topics: tuple[str, ...] = (),
    topic_pattern: str = "",
) -> Lag:
    """Messages, bytes and the oldest store time of the subscribed topics in ``[start, end)``.

    Without a topic filter: ``backlog`` plus one store timestamp. With one: the headers of at
    most ``records_max + 1`` records are read with their topics (no body, no properties);
    past that the counts extrapolate the share of subscribed records by log bytes.
    """
    if not topics and not topic_pattern:
        found = backlog(view, start, end, records_max)
        return Lag(found.messages, found.bytes, found.exact, first_store_time(view, start, end))
    walked = matched = matched_bytes = 0
    oldest = -1
    chunk = max(1, min(_HOP_RECORDS, records_max + 1))
    for span, buf, starts, is_blank in _units(view, start, end, chunk):
        if is_blank:
            continue
        if walked + len(starts) > records_max:
            spanned = int(starts[records_max - walked]) - start
            starts = starts[: records_max - walked]
            hits = _count_subscribed(buf, span.base_offset, starts, topics, topic_pattern)
            matched, matched_bytes = matched + hits[0], matched_bytes + hits[1]
            oldest = oldest if oldest >= 0 or hits[2] < 0 else hits[2]
            scale = max(0, end - start) / max(1, spanned)
            return Lag(round(matched * scale), round(matched_bytes * scale), False, oldest)
        hits = _count_subscribed(buf, span.base_offset, starts, topics, topic_pattern)
        walked += len(starts)
        matched, matched_bytes = matched + hits[0], matched_bytes + hits[1]
        oldest = oldest if oldest >= 0 or hits[2] < 0 else hits[2]
    return Lag(matched, matched_bytes, True, oldest)


def _subscribed(
    buf: object, base: int, starts: np.ndarray, topics: tuple[str, ...], pattern: str
) -> tuple[np.ndarray, np.ndarray]:
    """(1 where the record's topic is subscribed else 0, TOTALSIZE) for each of ``starts``."""
    import pyarrow.compute as pc  # here, not at the top: the planning processes start sooner

    positions = starts - base
    data = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    sizes = gather_rows(data, positions, 4).view(">i4").reshape(-1).astype(np.int64)
    names = _topic_names(data, positions, positions + sizes)
    if topics:
        names_set = pa.array([t.encode() for t in topics], pa.large_binary())
        wanted = pc.is_in(names, value_set=names_set)
    else:
        text = pc.cast(names, pa.string(), safe=False)
        wanted = pc.match_substring_regex(text, f"^(?:{pattern})$")
    mask = np.asarray(wanted.to_numpy(zero_copy_only=False), dtype=bool)
    return mask.astype(np.int64), sizes


def _count_subscribed(
    buf: object, base: int, starts: np.ndarray, topics: tuple[str, ...], pattern: str
) -> tuple[int, int, int]:
    """(records, their bytes, store time of the first) of ``starts`` whose topic is wanted."""
    if not len(starts):
        return 0, 0, -1
    mask, sizes = _subscribed(buf, base, starts, topics, pattern)
    hits = np.flatnonzero(mask)
    if not len(hits):
        return 0, 0, -1
    oldest = int(_store_ts(buf, starts[hits[:1]] - base)[0])
    return len(hits), int(sizes[hits].sum()), oldest


def _topic_names(data: np.ndarray, positions: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The TOPIC field of each record as a binary array (copied out of the segment).

    A header that does not add up gives an empty name (never subscribed): the read reports
    the damage, counting does not fail on it.
    """
    layouts = (data[positions + HOST_FLAGS_BYTE] >> HOST_FLAGS_SHIFT) & 3
    body_at = positions + _BODY_SIZE_AT[layouts]  # BODYLENGTH
    body_size = gather_rows(data, body_at, 4).view(">i4").reshape(-1).astype(np.int64)
    is_v2 = gather_rows(data, positions + 4, 4).view(">u4").reshape(-1) == MESSAGE_MAGIC_CODE_V2
    len_at = np.clip(body_at + 4 + body_size, positions, np.maximum(positions, ends - 2))
    size = np.where(
        is_v2,
        (data[len_at].astype(np.int64) << 8) | data[len_at + 1],
        data[len_at].astype(np.int64),
    )
    at = len_at + np.where(is_v2, 2, 1)
    ok = (body_size >= 0) & (at + size <= ends)
    size = np.where(ok, size, 0)
    offsets = np.zeros(len(positions) + 1, dtype=np.int64)
    np.cumsum(size, out=offsets[1:])
    index = np.arange(int(offsets[-1]), dtype=np.int64) + np.repeat(at - offsets[:-1], size)
    chars = data[index]
    return pa.Array.from_buffers(
        pa.large_binary(), len(positions), [None, pa.py_buffer(offsets), pa.py_buffer(chars)]
    )


def store_time_at(view: StoreView, physical_offset: int) -> int | None:
    """The store timestamp of the record at ``physical_offset``; ``None`` if it is gone."""
    span = view.span_at(physical_offset)
    if span is None:
        return None
    try:
        mapped = MappedSegment(view.segment_path(span.base_offset))
    except FileNotFoundError:
        return None
    with mapped:
        position = physical_offset - span.base_offset
        if position + 80 > mapped.size_bytes:
            return None
        return int(_store_ts(mapped.buffer, np.array([position]))[0])


def first_store_time(view: StoreView, start: int, end: int) -> int:
    """The store time of the first record in ``[start, end)``; -1 when there is none."""
    for span, buf, starts, is_blank in _units(view, start, end, 1):
        if not is_blank:
            return int(_store_ts(buf, starts[:1] - span.base_offset)[0])
    return -1


def check_boundary(view: StoreView, offset: int, end: int, option: str = "startingOffsets") -> None:
    """Raise ``SourceError`` unless ``offset`` is a place a query may start or stop: a record
    start, a BLANK record, a segment start, or the readable end ``end``; the message names
    ``option`` (the one that gave the offset).
    """
    if offset == end or any(s.base_offset == offset for s in view.spans):
        return
    span = view.span_at(offset)
    if span is None or offset > end:
        raise SourceError(
            f"{option} physical_offset {offset} is outside the readable log "
            f"[{view.min_offset}, {end}]"
        )
    with MappedSegment(view.segment_path(span.base_offset)) as mapped:
        position = offset - span.base_offset
        limit = min(mapped.size_bytes, end - span.base_offset)
        if is_record_start(mapped.buffer, span.base_offset, position, limit):
            return
        head = bytes(mapped.buffer[position : position + 8])
        if len(head) == 8 and int.from_bytes(head[4:], "big") == BLANK_MAGIC_CODE:
            return
        nearest = sync_forward(mapped.buffer, span.base_offset, position, limit)
    raise SourceError(
        f"{option} physical_offset {offset} is not the start of a record "
        f"(the next record starts at {span.base_offset + nearest})"
    )


def offset_for_timestamp(view: StoreView, timestamp_ms: int, start: int, end: int) -> int:
    """The first record in ``[start, end)`` stored at or after ``timestamp_ms``; ``end`` if none.

    Store timestamps are taken under the broker's put lock, so they grow along the log; the
    search reads each segment's first timestamp to pick one segment, then that segment's
    record headers.
    """
    spans = [s for s in view.spans if s.end_offset > start and s.base_offset < end]
    first_ts: list[int] = []
    for span in spans:
        with MappedSegment(view.segment_path(span.base_offset)) as mapped:
            position = max(start, span.base_offset) - span.base_offset
            limit = min(mapped.size_bytes, end - span.base_offset)
            if not is_record_start(mapped.buffer, span.base_offset, position, limit):
                first_ts.append(-(1 << 63))
                continue
            first_ts.append(_store_ts(mapped.buffer, np.array([position]))[0])
    # The last segment whose first record is older than the target holds the answer (or the
    # next segment's first record is it).
    pick = 0
    for index, value in enumerate(first_ts):
        if value < timestamp_ms:
            pick = index
    search_from = max(start, spans[pick].base_offset) if spans else start
    for span, buf, starts, is_blank in _units(view, search_from, end):
        if is_blank:
            continue
        stamps = _store_ts(buf, starts - span.base_offset)
        hits = np.flatnonzero(stamps >= timestamp_ms)
        if len(hits):
            return int(starts[hits[0]])
    return end


def _store_ts(buf: object, positions: np.ndarray) -> np.ndarray:
    data = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    layouts = (data[positions + HOST_FLAGS_BYTE] >> HOST_FLAGS_SHIFT) & 3
    at = positions + _STORE_TS_AT[layouts]
    return gather_rows(data, at, 8).view(">i8").reshape(-1).astype(np.int64)


def readable_end(view: StoreView, cache: TailCache | None = None) -> int:
    """The physical offset readers may read up to (exclusive): ``store.readable.readable_end``
    (the one end-of-log rule), with a vectorised walk over the record headers of the newest
    segment as its fast path; the decision at the tail is the scan's judge.

    Raises
    ------
    CorruptRecordError, DataMissingError, CheckpointDamagedError
        As ``store.readable.readable_end``: damage, or acknowledged data missing.
    """
    return readable.readable_end(view, cache=cache, walk=walk_headers).offset


def walk_headers(path: Path, base: int, position: int) -> int:
    """How far the records from ``position`` are structurally valid (magic, PHYSICALOFFSET
    naming its own position), hopping TOTALSIZE over headers; stops at a BLANK, at bytes
    that are not a record header, or at a record running past the file."""
    try:
        mapped = MappedSegment(path)
    except FileNotFoundError:
        return position
    with mapped:
        buf, size = mapped.buffer, mapped.size_bytes
        data = np.frombuffer(buf, dtype=np.uint8)
        while position < size:
            starts, after = hop(buf, position, size, size, _HOP_RECORDS, _HOP_BYTES)
            found = np.frombuffer(starts, dtype=np.int64) if len(starts) else np.zeros(0, int)
            if not len(found):
                return position
            rows = gather_rows(data, found, PHYSICAL_OFFSET_POSITION + 8)
            magics = rows[:, MAGIC_POSITION : MAGIC_POSITION + 4].copy().view(">u4").reshape(-1)
            phys = rows[:, PHYSICAL_OFFSET_POSITION:].copy().view(">i8").reshape(-1)
            bad = (phys != base + found) | ~np.isin(magics, _MESSAGE_MAGICS)
            stop = np.flatnonzero(bad)
            if len(stop):
                return int(found[stop[0]])
            position = after
            if len(starts) < _HOP_RECORDS:
                break
        return position
