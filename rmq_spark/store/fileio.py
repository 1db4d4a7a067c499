"""File access for the store: the ``SegmentFile`` protocol, its two real implementations and a
fault-injecting wrapper for tests.

Owns no code, only the names callers import, from the three modules that hold every ``os``
call on segment and checkpoint files:

- ``segment_files.py``: ``SegmentFile``/``FileOpener``, ``OsFile`` (pwrite/pread),
  ``MmapFile`` (a shared mapping, RocketMQ's ``MappedFile``) and ``OsOpener`` (atomic,
  preallocated segment creation);
- ``file_ops.py``: durable creation and replacement (``fsync_dir``, ``write_file_atomically``,
  ``make_dirs_durably``), allocation and zeroing;
- ``file_faults.py``: ``FaultPlan``, ``FaultyFile``, ``FaultyOpener`` and the ``FAILPOINTS``.

Does not own file names, record contents or any policy about when to flush.
"""

from __future__ import annotations

from rmq_spark.store.file_faults import FAILPOINTS, FaultPlan, FaultyFile, FaultyOpener
from rmq_spark.store.file_ops import fsync_dir, make_dirs_durably, write_file_atomically
from rmq_spark.store.segment_files import (
    FileKind,
    FileOpener,
    MmapFile,
    OsFile,
    OsOpener,
    SegmentFile,
)

__all__ = [
    "FAILPOINTS",
    "FaultPlan",
    "FaultyFile",
    "FaultyOpener",
    "FileKind",
    "FileOpener",
    "MmapFile",
    "OsFile",
    "OsOpener",
    "SegmentFile",
    "fsync_dir",
    "make_dirs_durably",
    "write_file_atomically",
]
