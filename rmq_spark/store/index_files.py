"""``IndexFiles``: the ``index/`` directory of a store (docs/FORMAT.md 11; RocketMQ
``IndexService``).

Owns the index files: loading them in name order, each memory-mapped at the configured size,
creating the next one (named by the time it is created, ``index_file.index_file_name``) when
the last is full, starting where the full one ended, flushing, handing the full file's end
timestamp to the checkpoint (``indexMsgTimestamp``), looking keys up newest file first, and
deleting files whose records retention deleted. Does not own the bytes of a file
(``index_file.py``) nor which records give which keys (``index_dispatch.py``).

Files are written through their mappings by one thread at a time (the dispatch round);
``query`` may run in any thread (the list of files is replaced, never changed in place; a
roll and retention replace it under a lock).
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from rmq_spark.errors import StoreMetadataError
from rmq_spark.store.file_ops import fsync_dir, preallocate
from rmq_spark.store.hashing import index_key_hash
from rmq_spark.store.index_file import (
    MAX_QUERY_RESULTS,
    IndexBuffer,
    index_file_name,
    index_file_size,
)

__all__ = ["INDEX_DIR", "IndexFiles", "OpenIndexFile"]

INDEX_DIR = "index"
_RESERVE_BYTES = 1 << 20  # entries allocated ahead of use: ~52,000 keys
_log = logging.getLogger(__name__)


class OpenIndexFile:
    """One mapped index file. The file is sparse; the blocks a write goes to are allocated
    first (``reserve``: the slot table at once, entries a chunk ahead), so a full disk is an
    ``OSError`` there, never a SIGBUS in a write through the mapping."""

    def __init__(
        self, path: Path, hash_slots: int, entries: int, *, create: bool, read_only: bool = False
    ) -> None:
        size = index_file_size(hash_slots, entries)
        flags = os.O_RDONLY if read_only else os.O_RDWR
        fd = os.open(path, flags | (os.O_CREAT | os.O_EXCL if create else 0), 0o644)
        try:
            found = os.fstat(fd).st_size
            if create:
                os.ftruncate(fd, size)
            elif found != size:
                raise StoreMetadataError(
                    str(path),
                    f"index file of {found} bytes, not {size} (store.index_hash_slots = "
                    f"{hash_slots}, store.index_entries = {entries})",
                )
            access = mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE
            self._map = mmap.mmap(fd, size, access=access)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._size = size
        self._allocated = 0
        self.path = path
        self.index = IndexBuffer(self._map, hash_slots, entries)  # type: ignore[arg-type]

    @property
    def name(self) -> str:
        return self.path.name

    def reserve(self, keys: int) -> None:
        """Allocate the blocks that ``keys`` more entries (and every slot) are written to
        (raises ``OSError``, e.g. ENOSPC)."""
        index = self.index
        end = index_file_size(index.hash_slots, min(index.header.index_count + keys, index.entries))
        if end > self._allocated:
            end = min(self._size, max(end, self._allocated + _RESERVE_BYTES))
            preallocate(self._fd, self._allocated, end - self._allocated)
            self._allocated = end

    def flush(self) -> None:
        self._map.flush()

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)


class IndexFiles:
    """The index files of an open store (use ``load``).

    ``on_full`` is called with a full file's end timestamp once it is flushed (the store's
    checkpoint records it as ``indexMsgTimestamp``)."""

    def __init__(
        self,
        directory: Path,
        hash_slots: int,
        entries: int,
        files: list[OpenIndexFile],
        on_full: Callable[[int], None],
        now_ms: Callable[[], int],
    ) -> None:
        self.directory = directory
        self.hash_slots = hash_slots
        self.entries = entries
        self.files = files
        self._on_full = on_full
        self._now_ms = now_ms
        self._lock = threading.Lock()  # the list: a roll (dispatch) against retention

    @classmethod
    def load(
        cls,
        root_dir: Path,
        hash_slots: int,
        entries: int,
        on_full: Callable[[int], None],
        now_ms: Callable[[], int],
        *,
        read_only: bool = False,
    ) -> IndexFiles:
        """Map every file of ``<root>/index`` in name order (raises ``StoreMetadataError``
        for a file of another size, ``OSError``). ``read_only``: for lookups beside a
        running broker (``rmq-spark query --store --key``); no directory is created."""
        directory = root_dir / INDEX_DIR
        if not read_only:
            directory.mkdir(parents=True, exist_ok=True)
        elif not directory.is_dir():
            return cls(directory, hash_slots, entries, [], on_full, now_ms)
        files: list[OpenIndexFile] = []
        try:
            for path in sorted(p for p in directory.iterdir() if p.is_file()):
                files.append(
                    OpenIndexFile(path, hash_slots, entries, create=False, read_only=read_only)
                )
        except BaseException:
            for file in files:
                file.close()
            raise
        return cls(directory, hash_slots, entries, files, on_full, now_ms)

    def indexed_through(self) -> tuple[int, int]:
        """``(offset, keys)``: the physical offset of the last record indexed (-1: none) and
        how many of its keys are (the last ones may be missing: a file filled up in the middle
        of its keys, and the next file was deleted after a crash)."""
        through, keys = -1, 0
        for file in reversed(self.files):
            index = file.index
            count = index.header.index_count
            if count <= 1:
                continue
            if through < 0:
                through = index.header.end_phy_offset
            number = count - 1
            while number >= 1 and index.entry(number)[1] == through:
                keys, number = keys + 1, number - 1
            if number >= 1:
                break
        return through, keys

    def drop_newer_than(self, index_msg_timestamp: int) -> int:
        """Delete the files whose end timestamp is past the checkpoint's ``indexMsgTimestamp``
        (after a crash: what a machine crash may have torn, the files not known full and
        flushed; ``IndexService.load``); returns how many. Their records are indexed again."""
        kept = [f for f in self.files if f.index.header.end_timestamp <= index_msg_timestamp]
        dropped = [f for f in self.files if f not in kept]
        for file in dropped:
            _log.warning("index: rebuilding %s (written after the last checkpoint)", file.path)
            file.close()
            file.path.unlink()
        if dropped:
            fsync_dir(self.directory)
        self.files = kept
        return len(dropped)

    def put(self, hashes: Sequence[int], offsets: Sequence[int], stamps: Sequence[int]) -> None:
        """Index keys (keyHash, physical offset, store timestamp of their record), in a new
        file whenever the last one is full."""
        done = 0
        while done < len(hashes):
            file = self._last()
            file.reserve(len(hashes) - done)
            done = file.index.put(hashes, offsets, stamps, done)

    def _last(self) -> OpenIndexFile:
        files = self.files
        if files and not files[-1].index.full:
            return files[-1]
        previous = files[-1] if files else None
        now = self._now_ms()
        path = self.directory / index_file_name(now)
        while path.exists():  # two files within a millisecond
            now += 1
            path = self.directory / index_file_name(now)
        file = OpenIndexFile(path, self.hash_slots, self.entries, create=True)
        fsync_dir(self.directory)
        if previous is not None:
            header = previous.index.header
            file.index.preset(header.end_phy_offset, header.end_timestamp)
            previous.flush()
            self._on_full(header.end_timestamp)
        with self._lock:
            self.files = [*self.files, file]
        return file

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Physical offsets of records indexed under ``key`` in ``topic`` and stored within
        ``[begin, end]`` ms, newest file first, at most ``min(max_num, 64)``; a hash collision
        can add other records (``IndexService.queryOffset``: callers check the record)."""
        max_num = min(max_num, MAX_QUERY_RESULTS)
        key_hash = index_key_hash(f"{topic}#{key}")
        found: list[int] = []
        for file in reversed(self.files):
            index = file.index
            if index.time_matched(begin, end):
                found += index.select(key_hash, max_num - len(found), begin, end)
            if index.header.begin_timestamp < begin or len(found) >= max_num:
                break
        return found

    def delete_below(self, min_physical_offset: int) -> None:
        """Delete the files, but the last, whose records all lie below the log's first offset
        (``IndexService.deleteExpiredFile``)."""
        with self._lock:
            files = self.files
            cut = 0
            while (
                cut < len(files) - 1
                and files[cut].index.header.end_phy_offset < min_physical_offset
            ):
                cut += 1
            self.files = files[cut:]
        if cut:
            for file in files[:cut]:
                file.close()
                file.path.unlink(missing_ok=True)

    def flush(self) -> None:
        for file in self.files:
            file.flush()

    def close(self) -> None:
        files, self.files = self.files, []
        for file in files:
            file.close()
