"""Fault injection for the store's files, for tests: ``FaultyFile`` and ``FaultyOpener``.

Failpoints: ``append`` (a segment write), ``fsync``, ``roll`` (creating a segment),
``truncate``, ``checkpoint`` (a checkpoint-file write). Each raises ``OSError(errno)``
(ENOSPC by default, or EIO) after ``after`` successful hits (``FaultPlan``). Does not own the
real files (``segment_files.py``): a faulty file wraps one and delegates to it.
"""

from __future__ import annotations

import errno
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from rmq_spark.store.segment_files import FileKind, FileOpener, OsOpener, SegmentFile

__all__ = ["FAILPOINTS", "FaultPlan", "FaultyFile", "FaultyOpener"]

FAILPOINTS = ("append", "fsync", "roll", "truncate", "checkpoint")


@dataclass
class FaultPlan:
    """Where and when ``FaultyFile`` fails. Shared by every file one ``FaultyOpener`` opens.

    Parameters
    ----------
    fail_at
        One of ``FAILPOINTS``.
    after
        Let this many hits of the failpoint succeed before failing.
    times
        Fail this many times, then succeed again; ``None``: fail forever.
    error
        The ``errno`` raised (``errno.ENOSPC``, ``errno.EIO``, ...).
    partial_bytes
        For ``append``: the *first* failing write writes this many bytes of its data before
        failing (a torn write); later failures write nothing.
    """

    fail_at: str
    after: int = 0
    times: int | None = None
    error: int = errno.ENOSPC
    partial_bytes: int = 0
    hits: int = 0
    failures: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.fail_at not in FAILPOINTS:
            raise ValueError(f"fail_at: {self.fail_at!r} is not one of {FAILPOINTS}")

    def should_fail(self, point: str) -> bool:
        """Count a hit of ``point``; True if this hit must fail."""
        if point != self.fail_at:
            return False
        with self._lock:
            self.hits += 1
            if self.hits <= self.after:
                return False
            if self.times is not None and self.failures >= self.times:
                return False
            self.failures += 1
            return True

    def raise_error(self, point: str, path: Path) -> None:
        raise OSError(self.error, f"injected failure at {point}: {os.strerror(self.error)}", path)


class FaultyFile:
    """A ``SegmentFile`` that fails at a named failpoint (``FaultPlan``), else delegates."""

    def __init__(
        self,
        inner: SegmentFile,
        plan: FaultPlan | None = None,
        kind: FileKind = FileKind.SEGMENT,
        **plan_args: object,
    ) -> None:
        self._inner = inner
        self.path = inner.path
        self.plan = plan if plan is not None else FaultPlan(**plan_args)  # type: ignore[arg-type]
        self._kind = kind

    def write(self, position: int, data: bytes | bytearray | memoryview) -> None:
        point = "checkpoint" if self._kind is FileKind.CHECKPOINT else "append"
        if self.plan.should_fail(point):
            partial = min(self.plan.partial_bytes, len(data))
            if partial and self.plan.failures == 1:
                self._inner.write(position, memoryview(data)[:partial])
            self.plan.raise_error(point, self.path)
        self._inner.write(position, data)

    def write_through(self, position: int, data: bytes | bytearray | memoryview) -> None:
        if self.plan.should_fail("append"):  # a staged segment's commit is its append
            self.plan.raise_error("append", self.path)
        self._inner.write_through(position, data)

    def read(self, position: int, size: int) -> bytes:
        return self._inner.read(position, size)

    def fsync(self) -> None:
        point = "checkpoint" if self._kind is FileKind.CHECKPOINT else "fsync"
        if self.plan.should_fail(point):
            self.plan.raise_error(point, self.path)
        self._inner.fsync()

    def truncate(self, position: int) -> None:
        if self.plan.should_fail("truncate"):
            self.plan.raise_error("truncate", self.path)
        self._inner.truncate(position)

    def write_zeros(self, position: int, length: int, piece: int) -> None:
        self._inner.write_zeros(position, length, piece)  # warming: no failpoint of its own

    def sync_data(self) -> None:
        self._inner.sync_data()

    def size(self) -> int:
        return self._inner.size()

    def close(self) -> None:
        self._inner.close()


class FaultyOpener:
    """A ``FileOpener`` whose files are ``FaultyFile``s sharing one ``FaultPlan``; ``roll``
    fails segment creation."""

    def __init__(self, plan: FaultPlan, inner: FileOpener | None = None) -> None:
        self.plan = plan
        self._inner = inner if inner is not None else OsOpener()

    def open(self, path: Path, kind: FileKind, *, read_only: bool = False) -> SegmentFile:
        return FaultyFile(self._inner.open(path, kind, read_only=read_only), self.plan, kind)

    def create(self, path: Path, size_bytes: int, kind: FileKind) -> SegmentFile:
        if kind is FileKind.SEGMENT and self.plan.should_fail("roll"):
            self.plan.raise_error("roll", path)
        return FaultyFile(self._inner.create(path, size_bytes, kind), self.plan, kind)
