"""One CommitLog segment: a fixed-size, preallocated file named by its 20-digit base offset.

Owns the segment's write position (where the next record goes), its flushed position (up to
where an fsync covered it), appends, the 8-byte BLANK end-of-file record, reads by position
and logical truncation. Knows nothing of other segments (``commitlog.py``) nor of record
contents beyond the BLANK record's two fields (``codec.py``).

*Staging* (``start_staging``, SYNC stores; RocketMQ's ``transientStorePoolEnable``): appends
go to an anonymous memory copy of the file instead of the file, and ``commit`` (called by
every flush, just before its fsync) writes what was appended since the last commit through
the descriptor. The writer then never touches the page cache that the fsync writes back, so
it takes no write-protect faults and no TLB-flush interrupts for it (bench/bench_put.py:
SYNC with 64 asyncio producers +25-30 %). Nothing is lost that was acknowledged: SYNC
acknowledges only what an fsync covered, and every fsync commits first. Reads at or past
the position where staging started come from the stage (the file may not have them yet).

Thread safety: ``append``/``append_blank``/``truncate_to`` are called under the store's put
lock; ``flush`` and ``commit`` may run concurrently with appends and with each other (they
read the write position first, so the flushed position never claims more than the fsync
covered; two commits of one range write the same bytes); ``read`` is safe at any time.
"""

from __future__ import annotations

import mmap
from pathlib import Path

from rmq_spark.store.codec import encode_blank
from rmq_spark.store.fileio import SegmentFile
from rmq_spark.store.layout import END_FILE_MIN_BLANK_LENGTH

__all__ = ["Segment"]

# An append of a page or more goes through the descriptor (``write_through``, the same page
# cache the mapping shares): copying into fresh pages of a map takes a fault per 4 KiB,
# which ``pwrite`` does not; a smaller one mostly lands in a page the map already has.
_THROUGH_BYTES = 4096


class Segment:
    """One segment file.

    Parameters
    ----------
    base_offset
        Physical offset of the file's first byte (its name).
    file
        The open ``SegmentFile`` (its size is the segment size).
    write_position
        Where the next record goes; recovery sets the real value.
    """

    __slots__ = (
        "base_offset",
        "size_bytes",
        "file",
        "mapping",
        "write_position",
        "flushed_position",
        "limit",
        "stage",
        "stage_base",
        "committed_position",
    )

    def __init__(self, base_offset: int, file: SegmentFile, write_position: int = 0) -> None:
        self.base_offset = base_offset
        self.file = file
        self.size_bytes = file.size()
        # The writable memory map of an ``MmapFile`` (else ``None``): the put path packs a
        # record straight into it, then advances ``write_position`` (``append`` semantics).
        self.mapping: mmap.mmap | None = getattr(file, "mapping", None)
        assert 0 <= write_position <= self.size_bytes
        self.write_position = write_position
        self.flushed_position = write_position
        # The writer writes only below ``limit``: the whole file, unless a ``SegmentWarmer``
        # is zero-filling the rest (``warm.py``; ``CommitLog.segment_for_append`` raises it).
        self.limit = self.size_bytes
        self.stage: mmap.mmap | None = None
        """The anonymous memory copy appends go to while staging (else ``None``)."""
        self.stage_base = self.size_bytes
        """Where staging started: the stage holds every byte from here to the write position."""
        self.committed_position = write_position
        """Up to where the stage has been written to the file."""

    def start_staging(self) -> None:
        """From the write position on, append into an anonymous memory copy of the file
        (``commit`` writes it to the file before each fsync). The memory is only used as
        records are appended, and released once the full segment is committed."""
        if self.stage is not None or self.is_full:
            return
        stage = mmap.mmap(-1, self.size_bytes)
        position = self.write_position
        self.committed_position = position
        self.stage_base = position
        self.stage = stage
        self.mapping = stage

    def commit(self) -> int:
        """Write what was staged since the last commit to the file (through its descriptor,
        not its mapping); returns the write position it covers. Without staging, the write
        position (appends are in the file already). Raises ``OSError``."""
        position = self.write_position
        stage = self.stage
        if stage is None:
            return position
        start = self.committed_position
        if position > start:
            self.file.write_through(start, memoryview(stage)[start:position])
            if position > self.committed_position:
                self.committed_position = position
        if position >= self.size_bytes:  # full and written: reads go to the file again
            self.stage_base = self.size_bytes
            self.stage = None
            self.mapping = None
        return position

    @property
    def path(self) -> Path:
        return self.file.path

    @property
    def end_offset(self) -> int:
        """Physical offset just past the file (the next segment's base)."""
        return self.base_offset + self.size_bytes

    @property
    def write_offset(self) -> int:
        """Physical offset where the next record goes."""
        return self.base_offset + self.write_position

    @property
    def is_full(self) -> bool:
        return self.write_position >= self.size_bytes

    def fits(self, size_bytes: int) -> bool:
        """Whether a record (or batch) of ``size_bytes`` fits and leaves room for a BLANK."""
        return size_bytes + END_FILE_MIN_BLANK_LENGTH <= self.size_bytes - self.write_position

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the write position and advance it; returns the position used.

        On ``OSError`` the write position does not move. A torn write may have left part of
        ``data`` in the file; the caller zeroes it (``discard_after_failed_write``).
        """
        position = self.write_position
        stage = self.stage
        if stage is not None:
            stage[position : position + len(data)] = data
        elif len(data) >= _THROUGH_BYTES:
            self.file.write_through(position, data)
        else:
            self.file.write(position, data)  # the caller checked ``fits`` (CommitLog rolls)
        self.write_position = position + len(data)
        return position

    def append_blank(self) -> None:
        """Write the BLANK record (remaining size + BLANK magic) and mark the segment full."""
        remaining = self.size_bytes - self.write_position
        assert remaining >= END_FILE_MIN_BLANK_LENGTH
        stage = self.stage
        if stage is not None:
            stage[self.write_position : self.write_position + 8] = encode_blank(remaining)
        else:
            self.file.write(self.write_position, encode_blank(remaining))
        self.write_position = self.size_bytes

    def discard_after_failed_write(self, size_bytes: int) -> None:
        """Zero ``size_bytes`` from the write position (what a failed append may have left)."""
        if size_bytes > 0:
            stage = self.stage
            if stage is not None:
                position = self.write_position
                stage[position : position + size_bytes] = bytes(size_bytes)
            else:
                self.file.write(self.write_position, bytes(size_bytes))

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position`` (fewer at the end of the file)."""
        stage = self.stage
        if stage is None or position + size <= self.stage_base:
            return self.file.read(position, size)
        base = self.stage_base  # read once: ``commit`` may end staging meanwhile
        if position >= base:
            return stage[position : position + size]
        return self.file.read(position, base - position) + stage[base : position + size]

    def flush(self) -> int:
        """Commit, then fsync the file; returns (and records) the write position covered."""
        return self.sync(self.commit())

    def sync(self, position: int) -> int:
        """fsync the file, which holds everything below ``position`` (committed before the
        call); returns ``position`` and records it as flushed."""
        if position > self.flushed_position:
            self.file.fsync()
            self.flushed_position = max(self.flushed_position, position)
        return position

    def truncate_to(self, position: int) -> None:
        """Make ``position`` the write position and zero every byte after it."""
        assert 0 <= position <= self.size_bytes
        self.file.truncate(position)
        stage = self.stage
        if stage is not None:
            start = max(position, self.stage_base)
            if self.write_position > start:
                stage[start : self.write_position] = bytes(self.write_position - start)
            self.committed_position = min(self.committed_position, position)
        self.write_position = position
        self.flushed_position = min(self.flushed_position, position)

    def close(self) -> None:
        self.mapping = None
        self.stage = None
        self.file.close()

    def __repr__(self) -> str:
        return f"Segment({self.path.name}, write_position={self.write_position})"
