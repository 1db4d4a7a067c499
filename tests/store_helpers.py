"""Shared helpers for the store engine tests: tiny configs, puts, crash simulation, gates.

``tests/`` is on ``sys.path`` (``tests/conftest.py`` lives there): ``from store_helpers import``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rmq_spark.clock import Clock, ManualClock
from rmq_spark.store.codec import body_crc
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.fileio import FileKind, FileOpener, OsOpener, SegmentFile
from rmq_spark.store.layout import BORNHOST_V6_FLAG, STOREHOST_V6_FLAG
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.properties import KEY_SEPARATOR, KEYS, TAGS, UNIQ_KEY
from rmq_spark.store.put import PutRequest, PutResult

__all__ = [
    "keys_of",
    "stored_form",
    "tags_of",
    "uniq_key_of",
    "GatedOpener",
    "open_store",
    "put_many",
    "segment_paths",
    "small_config",
    "zero_from",
]


def small_config(root: Path, **overrides: Any) -> StoreConfig:
    """A store config with 4 KiB segments and no background surprises (no retention rounds,
    rare snapshots), ASYNC unless told otherwise."""
    values: dict[str, Any] = {
        "root_dir": root,
        "segment_size_bytes": 4096,
        "flush_policy": FlushPolicy.ASYNC,
        "clean_resource_interval_ms": 0,
        "snapshot_interval_ms": 3_600_000,
        "max_message_size_bytes": 1024,
    }
    values.update(overrides)
    return StoreConfig(**values)


def open_store(
    root: Path,
    clock: Clock | None = None,
    opener: FileOpener | None = None,
    **overrides: Any,
) -> MessageStore:
    return MessageStore.open(
        small_config(root, **overrides), clock or ManualClock(), file_opener=opener
    )


def put_many(
    store: MessageStore,
    count: int,
    *,
    topic: str = "TopicTest",
    body_size: int = 100,
    queue_id: int = 0,
    start: int = 0,
) -> list[PutResult]:
    """Put ``count`` messages with distinct bodies; asserts every one is PUT_OK."""
    results = []
    for index in range(start, start + count):
        body = (f"message-{index}-".encode() * body_size)[:body_size]
        result = store.put(PutRequest(topic, body, queue_id=queue_id))
        assert result.ok, result
        results.append(result)
    return results


def segment_paths(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def zero_from(path: Path, position: int) -> None:
    """Simulate a torn write in a preallocated file: everything from ``position`` reads zero,
    the file keeps its length (truncate, then extend again)."""
    size = path.stat().st_size
    with path.open("r+b") as handle:
        handle.truncate(position)
        handle.truncate(size)


class _GatedFile:
    def __init__(self, inner: SegmentFile, gate: GatedOpener) -> None:
        self._inner = inner
        self._gate = gate
        self.path = inner.path

    def write(self, position: int, data: Any) -> None:
        self._inner.write(position, data)

    def write_through(self, position: int, data: Any) -> None:
        self._inner.write_through(position, data)

    def read(self, position: int, size: int) -> bytes:
        return self._inner.read(position, size)

    def fsync(self) -> None:
        self._gate.fsync_entered.set()
        self._gate.release.wait()
        self._gate.fsync_count += 1
        self._inner.fsync()

    def truncate(self, position: int) -> None:
        self._inner.truncate(position)

    def write_zeros(self, position: int, length: int, piece: int) -> None:
        self._inner.write_zeros(position, length, piece)

    def sync_data(self) -> None:
        self._inner.sync_data()  # segment warming: not gated

    def size(self) -> int:
        return self._inner.size()

    def close(self) -> None:
        self._inner.close()


class GatedOpener:
    """An opener whose segment fsyncs block until ``release`` is set (``fsync_entered`` tells
    that one is waiting): lets a test hold a group commit open without sleeping."""

    def __init__(self) -> None:
        self._inner = OsOpener()
        self.release = threading.Event()
        self.release.set()
        self.fsync_entered = threading.Event()
        self.fsync_count = 0

    def open(self, path: Path, kind: FileKind, *, read_only: bool = False) -> SegmentFile:
        file = self._inner.open(path, kind, read_only=read_only)
        return _GatedFile(file, self) if kind is FileKind.SEGMENT else file

    def create(self, path: Path, size_bytes: int, kind: FileKind) -> SegmentFile:
        file = self._inner.create(path, size_bytes, kind)
        return _GatedFile(file, self) if kind is FileKind.SEGMENT else file


def ring_available() -> bool:
    """Whether the store can fsync through io_uring here (``FsyncRing.create``): where it
    can, SYNC ``put_async`` must take that path."""
    from rmq_spark.store.uring import FsyncRing

    ring = FsyncRing.create()
    if ring is None:
        return False
    ring.close()
    return True


def stored_form(record: MessageRecord) -> MessageRecord:
    """``record`` as it decodes after ``encode_record``: host bits in SYSFLAG and BODYCRC set."""
    hosts = (BORNHOST_V6_FLAG if record.born_host.is_ipv6 else 0) | (
        STOREHOST_V6_FLAG if record.store_host.is_ipv6 else 0
    )
    return dataclasses.replace(
        record,
        body=bytes(record.body),
        sys_flag=(record.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG)) | hosts,
        body_crc=body_crc(record.body),
    )


def keys_of(properties: Mapping[str, str]) -> list[str]:
    """The user KEYS, split on single spaces, empty tokens dropped (as the index builder does)."""
    return [key for key in properties.get(KEYS, "").split(KEY_SEPARATOR) if key]


def tags_of(properties: Mapping[str, str]) -> str | None:
    """The TAGS string, or ``None`` if absent or empty."""
    return properties.get(TAGS) or None


def uniq_key_of(properties: Mapping[str, str]) -> str | None:
    """The client unique id (UNIQ_KEY), or ``None``."""
    return properties.get(UNIQ_KEY) or None
