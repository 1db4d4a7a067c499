"""Where the readable log of a store directory ends, for readers that never write.

``readable_end`` applies the rule of ``scan.py`` (its one segment scan and end-of-log judge)
to a ``StoreView``: our running broker's published ``confirmPhyOffset``; a running foreign
writer's last complete record; the judged real end of a store nobody has open. Also owns
the checks every reader makes against the store's own records: a damaged checkpoint
(``check_checkpoint``) and a missing first segment that retention did not record
(``missing_prefix``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rmq_spark.errors import CheckpointDamagedError, DataMissingError
from rmq_spark.store.layout import segment_name
from rmq_spark.store.scan import (
    DEFAULT_MAX_RECORD_BYTES,
    LogEnd,
    LogScan,
    ScanStop,
    SegmentSource,
    StopKind,
    Walk,
    judge_end,
)
from rmq_spark.store.view import (
    CHECKPOINT_FILE,
    COMMITLOG_DIR,
    FileSegment,
    SegmentSpan,
    StoreView,
)

__all__ = [
    "TailCache",
    "ViewSegment",
    "check_checkpoint",
    "missing_prefix",
    "open_segments",
    "prefix_error",
    "readable_end",
]


def check_checkpoint(view: StoreView) -> None:
    """Raise ``CheckpointDamagedError`` if the checkpoint's offsets are impossible: negative,
    or beyond the segment files by more than one segment (a truncated or deleted last
    segment is loss, reported by ``judge_end``; this is a damaged file)."""
    values = view.checkpoint
    if values is None:
        return
    limit = max(view.max_extent, view.deleted_below) + view.segment_size
    for name, value in (
        ("masterFlushedOffset", values.master_flushed_offset),
        ("confirmPhyOffset", values.confirm_phy_offset),
    ):
        if not 0 <= value <= limit:
            raise CheckpointDamagedError(
                str(view.store_dir / CHECKPOINT_FILE),
                f"{name} is {value}, but the segment files end at {view.max_extent}",
            )


def missing_prefix(view: StoreView) -> tuple[int, int] | None:
    """``(floor, min_offset)`` when the oldest segments of a store we wrote are gone without
    retention having recorded it (``view.deleted_below``): loss, not retention. ``None``
    when nothing is missing, or the store is not ours (RocketMQ keeps no such record)."""
    if not view.ours or not view.spans or view.min_offset <= view.deleted_below:
        return None
    return view.deleted_below, view.min_offset


def prefix_error(view: StoreView, missing: tuple[int, int]) -> DataMissingError:
    """The error for ``missing_prefix``: names the first missing segment file."""
    floor, first = missing
    path = view.segment_path(floor - floor % view.segment_size)
    return DataMissingError(
        str(path),
        0,
        f"physical offsets [{floor}, {first}) are missing: the oldest segment file is gone "
        "and retention did not record deleting it (config/retention.json)",
    )


@dataclass
class TailCache:
    """What ``readable_end`` found last, kept while the files it read do not change (driver
    state; one answer, so a log that grows does not grow the cache)."""

    ends: dict[tuple[object, ...], LogEnd] = field(default_factory=dict)


def _signature(view: StoreView, start: int) -> tuple[object, ...]:
    stats: list[object] = [view.flushed_offset, view.deleted_below]
    for span in view.spans[start:]:
        try:
            stat = os.stat(view.segment_path(span.base_offset))
        except FileNotFoundError:
            stats.append(None)
            continue
        stats.append((span.base_offset, stat.st_size, stat.st_mtime_ns))
    return tuple(stats)


def _newest_with_data(segments: Sequence[SegmentSource]) -> int:
    for index in range(len(segments) - 1, -1, -1):
        if segments[index].read(0, 8) != bytes(8):
            return index
    return 0


def readable_end(
    view: StoreView,
    *,
    cache: TailCache | None = None,
    walk: Walk | None = None,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    check_crc: bool = False,
    tail: bool = False,
    from_offset: int | None = None,
) -> LogEnd:
    """Where the readable log of the store seen by ``view`` ends (the module's rule).

    Scans from the start of the newest segment that holds data, or from ``from_offset`` (a
    record boundary known to lie below the end) when that is later; ``walk`` is a fast path
    over record headers; the scan and the judgement at the tail are this module's.

    ``tail``: for a store our broker is running, read up to its last complete valid record
    instead of its published ``confirmPhyOffset`` (a writer recognising its own puts, which
    an ASYNC broker acknowledges before it publishes them; never checked against a torn
    tail, which may be a write in progress). Readers of acknowledged data leave it off.

    Raises
    ------
    CheckpointDamagedError, DataMissingError, CorruptRecordError
        As ``check_checkpoint`` and ``judge_end``.
    """
    check_checkpoint(view)
    if view.broker_open and view.publishes_end:
        published = _published_end(view)
        if not tail:
            return published
        from_offset = max(from_offset or 0, published.offset)
    durable = 0 if view.broker_open else view.flushed_offset
    segments = open_segments(view)
    try:
        start = _newest_with_data(segments)
        first = segments[start].base_offset if segments else view.min_offset
        if from_offset is not None and from_offset > first:
            start = next(
                (i for i, s in enumerate(segments) if from_offset < s.base_offset + s.size_bytes),
                start,
            )
            first = max(from_offset, segments[start].base_offset)
        key = (first, *_signature(view, start)) if cache is not None else ()
        if cache is not None and not view.broker_open and key in cache.ends:
            return cache.ends[key]
        found = _scan_and_judge(
            view, segments[start:], first, durable, walk, check_crc, max_record_bytes
        )
        if cache is not None and not view.broker_open:
            cache.ends = {key: found}
        return found
    finally:
        for segment in segments:
            segment.close()


def _scan_and_judge(
    view: StoreView,
    tail: Sequence[ViewSegment],
    first: int,
    durable: int,
    walk: Walk | None,
    check_crc: bool,
    max_record_bytes: int,
) -> LogEnd:
    if not tail:
        stop = ScanStop(view.min_offset, StopKind.BLANK, -1, None, 0)
    else:
        scan = LogScan(
            tail, first, None, check_crc=check_crc, with_body=False, topics=(),
            durable_offset=durable, walk=walk,
        )  # fmt: skip
        for _ in scan:
            pass
        stop = scan.stop
    return judge_end(
        tail,
        stop,
        durable_offset=durable,
        max_record_bytes=min(max_record_bytes, view.segment_size),
        live=view.broker_open,
        segment_size=view.segment_size,
    )


def _published_end(view: StoreView) -> LogEnd:
    """Our running broker's published end, checked against the files."""
    confirm = view.confirm_offset
    stop = ScanStop(confirm, StopKind.LIMIT, -1, None, 0)
    if confirm > view.max_extent:
        base = view.max_extent
        raise DataMissingError(
            str(view.store_dir / COMMITLOG_DIR / segment_name(base)),
            0,
            f"the segment files end at {base}, below the published confirmPhyOffset {confirm}",
        )
    return LogEnd(max(view.min_offset, confirm), stop)


def open_segments(view: StoreView) -> list[ViewSegment]:
    """Every listed segment of ``view``, for ``LogScan`` (each opened at its first read)."""
    return [ViewSegment(view, span) for span in view.spans]


class ViewSegment:
    """A listed segment read with ``pread``, sized as listed (a file growing meanwhile is
    read as listed), opened at its first read (a reader of the tail opens only the newest
    files). A file deleted since the listing reads as empty. ``close()`` it."""

    def __init__(self, view: StoreView, span: SegmentSpan) -> None:
        self._view = view
        self._span = span
        self._file: FileSegment | None = None
        self.base_offset = span.base_offset
        self.size_bytes = span.size_bytes
        self._gone = False

    @property
    def path(self) -> Path:
        return self._view.segment_path(self.base_offset)

    def read(self, position: int, size: int) -> bytes:
        if self._file is None:
            if self._gone:
                return b""
            try:
                self._file = self._view.segment(self._span)
            except FileNotFoundError:  # deleted by retention since the listing
                self._gone = True
                return b""
        return self._file.read(position, max(0, min(size, self.size_bytes - position)))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
