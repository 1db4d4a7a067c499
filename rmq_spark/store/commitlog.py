"""The CommitLog: the ordered, contiguous list of segments under ``<root>/commitlog``.

Owns loading the directory (FORMAT.md 1: sorted by name; a non-20-digit name is ignored with a
warning; a trailing 0-length file is deleted; a file whose length is not the segment size, or
a gap between files, fails the load), rolling to a new segment (the BLANK record first,
FORMAT.md 3), physical offset -> segment lookup, reads across segments, flushing the segments
written since the last flush, truncation to a physical offset (recovery) and deleting the
oldest segments (retention). Knows nothing of record contents (``codec.py``), of queue
offsets (``put.py``) or of when to flush (``flush.py``).

Thread safety: mutations (``segment_for_append``, ``truncate_to``, ``delete_oldest``) run
under the store's put lock. The segment list is replaced, never mutated in place, so readers
see a consistent snapshot without locking. ``flush`` may run in several threads at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from rmq_spark.errors import (
    OffsetOutOfRangeError,
    SegmentLayoutError,
    SegmentSizeMismatchError,
)
from rmq_spark.store.fileio import FileKind, FileOpener, fsync_dir
from rmq_spark.store.layout import is_segment_name, segment_name
from rmq_spark.store.segment import Segment

__all__ = [
    "CommitLog",
]

_log = logging.getLogger(__name__)


class CommitLog:
    """Ordered segments of one store.

    Parameters
    ----------
    directory
        ``<root>/commitlog``.
    segment_size_bytes
        The configured (fixed) file size.
    opener
        Opens and creates the files (``OsOpener`` or a ``FaultyOpener`` in tests).
    segments
        Already opened segments, oldest first (``CommitLog.load`` builds them).
    """

    def __init__(
        self,
        directory: Path,
        segment_size_bytes: int,
        opener: FileOpener,
        segments: list[Segment] | None = None,
    ) -> None:
        self.directory = directory
        self.segment_size_bytes = segment_size_bytes
        self._opener = opener
        self._segments: list[Segment] = []
        self.active: Segment | None = None
        """The last segment (where appends go), or ``None``; kept in step with ``segments``."""
        self.staging = False
        """Whether new segments stage their appends in memory (``Segment.start_staging``;
        set by SYNC stores, ``store.stage_writes``)."""
        self.on_committed: Callable[[], None] | None = None
        """Told after ``commit_since`` wrote appends to the files, before their fsync (a
        master's HA transfer: the slave's copy overlaps the fsync)."""
        self.warm_lock: threading.Lock | None = None
        """Set while a ``SegmentWarmer`` zero-fills the active segment ahead of the writer:
        appends stay below ``Segment.limit`` (see ``warm.py``)."""
        self._set_segments(list(segments or []))

    def _set_segments(self, segments: list[Segment]) -> None:
        self._segments = segments
        self.active = segments[-1] if segments else None

    # --- loading ------------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        directory: Path,
        segment_size_bytes: int,
        opener: FileOpener,
        *,
        read_only: bool = False,
    ) -> CommitLog:
        """Open every segment in ``directory`` (created if missing, unless ``read_only``).

        Each segment's write position is set to its full size; recovery sets the real one.

        Raises
        ------
        SegmentSizeMismatchError
            A segment whose length is not ``segment_size_bytes`` (RocketMQ refuses to start
            too); raised before anything is changed (not even an empty trailing file deleted).
        SegmentLayoutError
            Segments that are not exactly one segment size apart.
        """
        if not directory.exists():
            if read_only:
                return cls(directory, segment_size_bytes, opener)
            directory.mkdir(parents=True)
            fsync_dir(directory.parent)
        names = []
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            if entry.is_dir():
                _log.warning("ignoring directory %s in %s", entry.name, directory)
            elif not is_segment_name(entry.name):
                _log.warning(
                    "ignoring %s in %s: not a 20-digit segment name", entry.name, directory
                )
            else:
                names.append(entry.name)
        sizes = {name: (directory / name).stat().st_size for name in names}
        # A trailing empty file is one being created (RocketMQ 5.x deletes it on load).
        empty_tail = 0
        while empty_tail < len(names) and sizes[names[len(names) - 1 - empty_tail]] == 0:
            empty_tail += 1
        kept = names[: len(names) - empty_tail]
        _check_layout(directory, kept, sizes, segment_size_bytes)  # before changing anything
        if not read_only:
            for name in reversed(names[len(kept) :]):
                _log.warning("deleting empty trailing segment %s", directory / name)
                (directory / name).unlink()
                fsync_dir(directory)
        names = kept
        segments: list[Segment] = []
        try:
            for name in names:
                file = opener.open(directory / name, FileKind.SEGMENT, read_only=read_only)
                segments.append(Segment(int(name), file, write_position=segment_size_bytes))
        except BaseException:
            for segment in segments:
                segment.close()
            raise
        return cls(directory, segment_size_bytes, opener, segments)

    # --- offsets and lookup -------------------------------------------------------------------

    @property
    def segments(self) -> list[Segment]:
        """Oldest first. A snapshot: do not mutate."""
        return self._segments

    @property
    def min_offset(self) -> int:
        """Base offset of the oldest segment (0 when there is none)."""
        segments = self._segments
        return segments[0].base_offset if segments else 0

    @property
    def max_offset(self) -> int:
        """Physical offset where the next record goes."""
        segments = self._segments
        return segments[-1].write_offset if segments else 0

    @property
    def last(self) -> Segment | None:
        segments = self._segments
        return segments[-1] if segments else None

    def segment_for(self, physical_offset: int) -> Segment | None:
        """The segment holding ``physical_offset``, or ``None`` outside the files."""
        segments = self._segments
        if not segments:
            return None
        index = (physical_offset - segments[0].base_offset) // self.segment_size_bytes
        if 0 <= index < len(segments):
            return segments[index]
        return None

    def read(self, physical_offset: int, size: int) -> bytes:
        """``size`` bytes from ``physical_offset``; never crosses a segment boundary.

        Raises
        ------
        OffsetOutOfRangeError
            ``physical_offset`` is not inside ``[min_offset, max_offset)``.
        """
        segment = self.segment_for(physical_offset)
        if segment is None or physical_offset >= self.max_offset:
            raise OffsetOutOfRangeError(physical_offset, self.min_offset, self.max_offset)
        position = physical_offset - segment.base_offset
        return segment.read(position, min(size, segment.size_bytes - position))

    def next_segment_offset(self, physical_offset: int) -> int:
        """Start of the segment after the one holding ``physical_offset`` (``rollNextFile``)."""
        return physical_offset + self.segment_size_bytes - physical_offset % self.segment_size_bytes

    # --- appending ----------------------------------------------------------------------------

    def segment_for_append(self, size_bytes: int) -> Segment:
        """The segment the next ``size_bytes`` go into, rolling to a new one if needed, with
        its writable ``limit`` raised to cover them.

        Rolling creates the new file *first*, then writes the BLANK record into the current
        one, so a failure leaves the log as it was (a created but unused trailing file is
        tolerated on load). Caller holds the put lock and has checked that ``size_bytes + 8``
        fits an empty segment.

        Raises
        ------
        OSError
            Creating the next segment or writing the BLANK failed (nothing was appended).
        """
        segments = self._segments
        last = segments[-1] if segments else None
        if last is None or size_bytes + 8 > last.size_bytes - last.write_position:
            last = self._roll(last)
        if size_bytes + 8 > last.limit - last.write_position:
            self._raise_limit(last, last.write_position + size_bytes + 8)
        return last

    def _roll(self, last: Segment | None) -> Segment:
        base = 0 if last is None else last.end_offset
        path = self.directory / segment_name(base)
        file = self._opener.create(path, self.segment_size_bytes, FileKind.SEGMENT)
        segment = Segment(base, file)
        if self.staging:
            segment.start_staging()
        if last is not None and not last.is_full:
            try:
                if last.write_position + 8 > last.limit:
                    self._raise_limit(last, last.write_position + 8)
                last.append_blank()
            except BaseException:
                segment.close()
                raise
        lock = self.warm_lock
        if lock is None:
            self._set_segments([*self._segments, segment])
        else:
            with lock:  # the warmer starts on the new segment from its first byte
                segment.limit = 0
                self._set_segments([*self._segments, segment])
        return segment

    def _raise_limit(self, segment: Segment, end: int) -> None:
        """Let the writer write up to ``end`` (the warmer is behind, or there is none)."""
        lock = self.warm_lock
        if lock is None:
            segment.limit = segment.size_bytes
            return
        with lock:
            if segment.limit < end:
                segment.limit = min(segment.size_bytes, end)

    def start_staging(self) -> None:
        """Stage appends in memory from now on: the active segment from its write position,
        and every new segment (see ``segment.py``)."""
        self.staging = True
        active = self.active
        if active is not None:
            active.start_staging()

    # --- flushing -----------------------------------------------------------------------------

    def flush(self, from_offset: int) -> int:
        """fsync every segment written since ``from_offset``; returns the flushed offset.

        Safe to call from several threads at once (SYNC group commit overlaps fsyncs): each
        call covers what was written before it read the write positions.
        """
        if not self._segments:
            return 0
        flushed = from_offset
        # Each fsync covers what ``commit_since`` wrote, not appends staged since: writing those
        # too would put bytes in the file that ``on_committed`` never announced.
        for segment, position in self.commit_since(from_offset):
            flushed = segment.base_offset + segment.sync(position)
        return flushed

    def commit_since(self, from_offset: int) -> list[tuple[Segment, int]]:
        """Write what is staged in every segment written since ``from_offset`` to its file
        (``Segment.commit``); each such segment with the write position now in its file.
        ``on_committed`` is told before any fsync of them."""
        done = [(s, s.commit()) for s in self._segments if s.end_offset > from_offset]
        hook = self.on_committed
        if hook is not None and done:
            hook()
        return done

    @property
    def committed_offset(self) -> int:
        """End of the bytes in the segment files: the write end, less appends still staged
        in memory. A killed process leaves these bytes to the next open; a lost machine keeps
        only what an fsync covered."""
        end = self.max_offset
        for segment in reversed(self._segments):  # the staged ones are the last few
            if segment.stage is None:
                break
            committed = segment.committed_position
            if committed < segment.write_position:
                end = segment.base_offset + committed
        return end

    def mark_unflushed(self, physical_offset: int) -> None:
        """Forget that anything after ``physical_offset`` was fsynced (after recovery, the
        bytes a crashed process wrote may never have reached the disk)."""
        for segment in self._segments:
            if segment.end_offset > physical_offset:
                segment.flushed_position = max(0, physical_offset - segment.base_offset)

    # --- truncation and deletion --------------------------------------------------------------

    def truncate_to(self, physical_offset: int) -> None:
        """Make ``physical_offset`` the end of the log: zero the rest of its segment and
        delete every later segment (RocketMQ ``truncateDirtyFiles``, but zeroing the tail)."""
        keep: list[Segment] = []
        drop: list[Segment] = []
        for segment in self._segments:
            (drop if segment.base_offset > physical_offset else keep).append(segment)
        if keep:
            last = keep[-1]
            position = physical_offset - last.base_offset
            if position < last.size_bytes:
                last.truncate_to(position)
            else:
                last.write_position = position
        self._set_segments(keep)
        for segment in drop:
            segment.close()
            _log.warning("deleting segment %s past the end of the log", segment.path)
            segment.path.unlink()
        if drop:
            fsync_dir(self.directory)

    def delete_oldest(self, count: int) -> list[Path]:
        """Delete the ``count`` oldest segments, never the last one; returns their paths."""
        segments = self._segments
        count = min(count, len(segments) - 1)
        if count <= 0:
            return []
        doomed = segments[:count]
        self._set_segments(segments[count:])
        paths = []
        for segment in doomed:
            segment.close()
            with contextlib.suppress(FileNotFoundError):
                segment.path.unlink()
            paths.append(segment.path)
        fsync_dir(self.directory)
        return paths

    def close(self) -> None:
        for segment in self._segments:
            segment.close()


def _check_layout(
    directory: Path, names: list[str], sizes: dict[str, int], segment_size_bytes: int
) -> None:
    """Raise ``SegmentLayoutError`` unless every file is one segment long and they follow
    each other without a gap (FORMAT.md 1)."""
    distinct = {sizes[name] for name in names}
    store_size = distinct.pop() if len(distinct) == 1 else None
    expected = None
    for name in names:
        path = directory / name
        size = sizes[name]
        if size != segment_size_bytes:
            raise SegmentSizeMismatchError(path, size, segment_size_bytes, store_size)
        if expected is not None and int(name) != expected:
            raise SegmentLayoutError(
                path, f"segments are not contiguous: expected {segment_name(expected)} next"
            )
        expected = int(name) + segment_size_bytes
