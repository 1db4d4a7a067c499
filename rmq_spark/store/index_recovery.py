"""IndexFile recovery at open: index what the files lack (docs/FORMAT.md 11.2; RocketMQ
``IndexService.load`` and the reput after recovery).

After a crash (an ``abort`` file) the files whose end timestamp is past the checkpoint's
``indexMsgTimestamp`` are deleted (``IndexFiles.drop_newer_than``): a machine crash may have
kept some of their pages and not others, and a derived file is rebuilt rather than repaired.
Then every record of the recovered CommitLog past the last one indexed (from its first offset
when there is no file: a store written without an index) is read back with the store's one
scan and indexed; after a clean close that is nothing, or the records of the log's tail.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from rmq_spark.store.index_dispatch import IndexDispatch
from rmq_spark.store.index_files import IndexFiles
from rmq_spark.store.scan import LogScan, SegmentSource

__all__ = ["IndexRecovery", "recover_index"]

_PUT_KEYS = 100_000  # keys gathered before they are written: memory stays bounded
_CHUNK_BYTES = 8 << 20
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IndexRecovery:
    """What index recovery did: deleted ``dropped_files`` files, indexed the records of
    ``[start_offset, end_offset)`` past the last one indexed."""

    dropped_files: int
    start_offset: int
    end_offset: int


def recover_index(
    files: IndexFiles,
    segments: Sequence[SegmentSource],
    *,
    min_offset: int,
    end_offset: int,
    clean_shutdown: bool,
    index_msg_timestamp: int,
) -> tuple[IndexDispatch, IndexRecovery]:
    """Bring ``files`` up to the recovered CommitLog ``[min_offset, end_offset)``; returns the
    dispatch that goes on from ``end_offset``.

    Raises
    ------
    OSError
        A file could not be deleted or created.
    """
    dropped = 0 if clean_shutdown else files.drop_newer_than(index_msg_timestamp)
    dispatch = IndexDispatch(files)
    start = max(min_offset, files.indexed_through()[0], 0)
    if end_offset - start > _CHUNK_BYTES:
        _log.info("index: indexing CommitLog [%d, %d)", start, end_offset)
    scan = LogScan(
        segments, start, end_offset, check_crc=False, with_body=False, durable_offset=None,
        chunk_bytes=min(_CHUNK_BYTES, max(64 << 10, end_offset - start)),
    )  # fmt: skip
    hashes: list[int] = []
    offsets: list[int] = []
    stamps: list[int] = []
    for decoded in scan:
        record = decoded.record
        dispatch.add_record(
            hashes, offsets, stamps, decoded.position, record.topic, record.sys_flag,
            record.properties, None, record.store_timestamp_ms,
        )  # fmt: skip
        if len(hashes) >= _PUT_KEYS:
            dispatch.put(hashes, offsets, stamps)
            hashes, offsets, stamps = [], [], []
    dispatch.put(hashes, offsets, stamps)
    report = IndexRecovery(dropped, start, end_offset)
    if dropped or end_offset - start > _CHUNK_BYTES:
        _log.info("index recovery: %s", report)
    return dispatch, report
