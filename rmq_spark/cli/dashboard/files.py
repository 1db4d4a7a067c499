"""The dashboard's read-only access to a store's files: ConsumeQueues loaded whole with numpy,
and CommitLog records read by physical offset through open segments kept for one request.

Owns speed, not rules: a page over a 1M-message store reads every unit of every queue and
makes thousands of store-time probes (the traffic chart's binary searches), which a unit at a
time in Python (``groups_command.QueueFiles``) costs seconds. The valid-prefix rule is
``QueueFiles``'s (RocketMQ's recover: in the last two files, units up to the first with a
negative offset or a size <= 0). Never takes a lock nor opens a file for writing.
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import numpy as np

from rmq_spark.store.codec import DecodedRecord, decode_record, store_timestamp_position
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR
from rmq_spark.store.view import FileSegment, StoreView

__all__ = ["LogReader", "QueueSnapshot", "topic_queue_snapshots"]

_UNIT = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])  # FORMAT.md 6
_I32, _I64 = struct.Struct(">i"), struct.Struct(">q")
_PHYSICAL_OFFSET_POSITION, _SYS_FLAG_POSITION = 28, 36  # FORMAT.md 2
_HEADER_PEEK_BYTES = 80  # reaches STORETIMESTAMP with an IPv6 born host


def _numbered(directory: Path) -> list[Path]:
    return sorted((p for p in directory.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def _valid_prefix(units: np.ndarray) -> np.ndarray:
    bad = (units["offset"] < 0) | (units["size"] <= 0)
    return units[: int(np.argmax(bad))] if bad.any() else units


class QueueSnapshot:
    """One ConsumeQueue's written units ``[min_offset, max_offset)``, read once.

    ``offsets[i]``, ``sizes[i]``: CommitLog offset and size of queue offset ``min_offset + i``.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.queue_id = int(directory.name)
        paths = _numbered(directory)
        loaded = [np.fromfile(path, dtype=_UNIT) for path in paths]
        if loaded:
            loaded[-1] = _valid_prefix(loaded[-1])
            if len(loaded) >= 2:
                loaded[-2] = _valid_prefix(loaded[-2]) if not len(loaded[-1]) else loaded[-2]
        units = np.concatenate(loaded) if loaded else np.zeros(0, dtype=_UNIT)
        self.min_offset = int(paths[0].name) // _UNIT.itemsize if paths else 0
        self.max_offset = self.min_offset + len(units)
        self.offsets = units["offset"].astype(np.int64)
        self.sizes = units["size"].astype(np.int64)

    @property
    def message_count(self) -> int:
        return self.max_offset - self.min_offset

    @property
    def size_bytes(self) -> int:
        return int(self.sizes[self.sizes > 0].sum())

    def unit(self, queue_offset: int) -> tuple[int, int]:
        """(CommitLog offset, size) of a written queue offset."""
        index = queue_offset - self.min_offset
        return int(self.offsets[index]), int(self.sizes[index])


def topic_queue_snapshots(root: Path, topic: str) -> list[QueueSnapshot]:
    """``topic``'s ConsumeQueues by queue id (``[]``: no such topic)."""
    directory = root / CONSUME_QUEUE_DIR / topic
    if not directory.is_dir():
        return []
    return [QueueSnapshot(path) for path in _numbered(directory)]


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
        head = segment.read(physical_offset - segment.base_offset, _HEADER_PEEK_BYTES)
        if len(head) < _HEADER_PEEK_BYTES:
            return -1
        if _I64.unpack_from(head, _PHYSICAL_OFFSET_POSITION)[0] != physical_offset:
            return -1
        sys_flag = _I32.unpack_from(head, _SYS_FLAG_POSITION)[0]
        return int(_I64.unpack_from(head, store_timestamp_position(sys_flag))[0])

    def decoded(self, physical_offset: int, size: int) -> DecodedRecord | None:
        """The whole record a unit points at; ``None`` when it is gone."""
        segment = self._segment(physical_offset)
        if segment is None:
            return None
        data = segment.read(physical_offset - segment.base_offset, size)
        decoded = decode_record(data, 0, path=str(segment.path), check_crc=False)
        if not isinstance(decoded, DecodedRecord):
            return None
        return dataclasses.replace(decoded, position=physical_offset)

    def close(self) -> None:
        for segment in self._segments.values():
            segment.close()
        self._segments.clear()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
