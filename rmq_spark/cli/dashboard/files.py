"""The dashboard's read-only access to a store's files: ConsumeQueues loaded whole (a
``CqView`` each, ``load``-ed: the traffic chart's thousands of probes then cost no read),
and CommitLog records read by physical offset through open segments kept for one request.

Owns speed, not rules: the queues' rules are ``store/consume_queue.py``'s, one record's read
``store/reader.read_record_at``, the record's field positions ``store/record_layout.py``.
Never takes a lock nor opens a file for writing.
"""

from __future__ import annotations

from pathlib import Path

from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.cq_view import CqView, queue_dirs
from rmq_spark.store.reader import read_record_at
from rmq_spark.store.record_layout import STORE_TIMESTAMP_REACH, peek_store_timestamp
from rmq_spark.store.view import FileSegment, StoreView

__all__ = ["LogReader", "topic_queue_snapshots"]


def topic_queue_snapshots(root: Path, topic: str) -> list[CqView]:
    """``topic``'s ConsumeQueues by queue id, each loaded (``[]``: no such topic)."""
    return [CqView.open(path).load() for path in queue_dirs(root, topic).values()]


class LogReader:
    """Records of one ``StoreView`` by physical offset, segments kept open until ``close``;
    a context manager."""

    def __init__(self, view: StoreView) -> None:
        self.view = view
        self._segments: dict[int, FileSegment] = {}

    def _segment(self, physical_offset: int) -> FileSegment | None:
        span = self.view.span_at(physical_offset)
        if span is None:
            return None
        segment = self._segments.get(span.base_offset)
        if segment is None:
            try:
                segment = self.view.segment(span)
            except FileNotFoundError:  # deleted by retention since the view was taken
                return None
            self._segments[span.base_offset] = segment
        return segment

    def store_time_ms(self, physical_offset: int) -> int:
        """The store time of the record at ``physical_offset``; -1 when it is gone or no
        record says it starts there (older than anything, for a binary search)."""
        segment = self._segment(physical_offset)
        if segment is None:
            return -1
        position = physical_offset - segment.base_offset
        head = segment.read(position, STORE_TIMESTAMP_REACH)
        stamp = peek_store_timestamp(head, 0, physical_offset)
        return -1 if stamp is None else stamp

    def decoded(self, physical_offset: int, size: int = 0) -> DecodedRecord | None:
        """The whole record a unit points at; ``None`` when it is gone."""
        segment = self._segment(physical_offset)
        if segment is None:
            return None
        return read_record_at(segment, physical_offset, check_crc=False)

    def close(self) -> None:
        for segment in self._segments.values():
            segment.close()
        self._segments.clear()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
