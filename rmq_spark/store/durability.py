"""``Durability``: what to fsync and when, and what a put waits for (the other half of a put
is ``appender.py``).

Owns the acknowledgement rule of each flush policy once a record is written: under SYNC a put
returns ``PUT_OK`` only after an fsync covered it. Thread producers share fsyncs through the
group commit (``flush.GroupCommit``: one fsync in flight, the next covers everything written
meanwhile); coroutines await waves of puts (``async_commit.AsyncGroupCommit``), fsynced by a
flush thread or, where the kernel offers io_uring, by their own event loop
(``ring_commit.py``). A flush outcome becomes a put status here: ``FLUSH_DISK_TIMEOUT`` after
``sync_flush_timeout_ms``, ``UNKNOWN_ERROR`` after a failed fsync, which makes the store fail
closed. Also owns publishing what is durable (``confirmPhyOffset``, ``masterFlushedOffset``,
the last store timestamp) in the checkpoint, and ASYNC's periodic flush and publish.

Does not own the writes (``appender.py``), files (``commitlog.py``, ``checkpoint.py``) or
the store's lifecycle (``message_store.py``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from rmq_spark.store.async_commit import AsyncGroupCommit, resolve_waves
from rmq_spark.store.checkpoint import Checkpoint
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.fileio import MmapFile, OsFile
from rmq_spark.store.flush import FlushWait, GroupCommit
from rmq_spark.store.latency import LatencyStats
from rmq_spark.store.put import PutResult, PutStatus
from rmq_spark.store.ring_commit import RingCommit
from rmq_spark.store.segment import Segment
from rmq_spark.store.uring import FsyncRing

__all__ = ["Durability"]

_DURABLE = FlushWait.DURABLE


class Durability:
    """fsyncs, acknowledgement waits and the checkpoint's durable offsets of one store.

    Parameters
    ----------
    config
        ``flush_policy``, ``sync_flush_timeout_ms``, ``io_uring``.
    commitlog, checkpoint
        The store's log and checkpoint.
    end
        The durable end of the log at start (recovery made it so).
    last_store_ts
        The store timestamp of the last record written (the appender's).
    on_failure
        Told when an fsync failed (the store fails closed).
    """

    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        checkpoint: Checkpoint,
        end: int,
        last_store_ts: Callable[[], int],
        on_failure: Callable[[OSError], None],
    ) -> None:
        self.sync = config.flush_policy is FlushPolicy.SYNC
        self._timeout_ms = config.sync_flush_timeout_ms
        self._io_uring = config.io_uring
        self._commitlog = commitlog
        self._checkpoint = checkpoint
        self._last_store_ts = last_store_ts
        self._on_failure = on_failure
        self._flush_lock = threading.Lock()
        self._flushed_offset = end
        self._published_confirm = end
        self._published_ts = 0
        self.group = GroupCommit(self._flush_and_publish, lambda: commitlog.max_offset, end)
        self._async_commit: AsyncGroupCommit | None = None
        self.fsync_stats = LatencyStats()  # fsyncs that made new bytes durable (metrics)

    @property
    def flushed_offset(self) -> int:
        return self.group.flushed_offset

    # --- what a put waits for -----------------------------------------------------------

    def wait(self, result: PutResult) -> PutResult:
        """SYNC: block until an fsync covers ``result``'s record (its status says if not)."""
        status = self._status(
            self.group.wait_durable(result.physical_offset + result.total_size, self._timeout_ms)
        )
        if status is not None:
            result.status, result.detail = status
        return result

    def wait_batch(self, results: list[PutResult], end: int) -> None:
        """SYNC: block until one fsync covers ``end``, the end of a batch's records."""
        _apply(results, self._status(self.group.wait_durable(end, self._timeout_ms)))

    async def wait_async(self, results: list[PutResult], end: int) -> None:
        """SYNC, on an event loop: await the fsync covering ``end`` (the loop stays free)."""
        if self.group.flushed_offset < end:
            outcome = await self._commit().wait(end)
            if outcome is not _DURABLE:
                _apply(results, self._status(outcome))

    def _status(self, outcome: FlushWait) -> tuple[PutStatus, str] | None:
        """``None`` for ``DURABLE``, else the status and detail of an unacknowledged put (a
        failed fsync makes the store fail closed)."""
        if outcome is _DURABLE:
            return None
        if outcome is FlushWait.TIMEOUT:
            return PutStatus.FLUSH_DISK_TIMEOUT, f"no fsync within {self._timeout_ms} ms"
        error = self.group.error
        self._on_failure(error or OSError("fsync failed"))
        return PutStatus.UNKNOWN_ERROR, f"fsync failed: {error}"

    def fail(self, error: OSError) -> None:
        """The store failed closed: every waiting and later flush fails."""
        self.group.fail(error)

    # --- fsync and publish --------------------------------------------------------------

    def flush_now(self) -> int:
        """fsync everything written so far and publish it (raises ``OSError``)."""
        return self.group.flush_now()

    def _flush_and_publish(self) -> int:
        """The group commit's fsync: the log, then the new offsets in the checkpoint.

        The fsync runs outside ``_flush_lock`` so that group commits can overlap fsyncs;
        publishing is serialised and only ever moves the offsets forward.
        """
        last_ts = self._last_store_ts()  # of a record written before the fsync reads positions
        before = self._flushed_offset
        started = time.perf_counter()
        flushed = self._commitlog.flush(before)
        if flushed > before:  # an idle periodic flush is no fsync worth timing
            self.fsync_stats.record(time.perf_counter() - started)
        return self._publish_flushed(flushed, last_ts)

    def _publish_flushed(self, flushed: int, last_ts: int) -> int:
        """Publish ``flushed`` (an fsync covered everything below it; ``last_ts`` is the store
        timestamp of a record written before that fsync started); returns the flushed offset
        (raises ``OSError``)."""
        with self._flush_lock:
            if flushed > self._flushed_offset:
                last_ts = max(last_ts, self._published_ts)
                if flushed > self._published_confirm:  # ASYNC may have published more already
                    self._checkpoint.publish_durable(flushed, last_ts)
                    self._published_confirm = flushed
                else:
                    self._checkpoint.publish_flushed(flushed, last_ts)
                self._flushed_offset = flushed
                self._published_ts = last_ts
            return self._flushed_offset

    def flush_task(self) -> None:
        """ASYNC's periodic fsync."""
        try:
            self.group.flush_now()
        except OSError as err:
            self._on_failure(err)

    def publish_task(self) -> None:
        """ASYNC: publish the end of the last fully written record as ``confirmPhyOffset``."""
        offset = self._commitlog.max_offset
        if offset > self._published_confirm:
            try:
                with self._flush_lock:
                    if offset > self._published_confirm:
                        self._checkpoint.publish_confirmed(offset)
                        self._published_confirm = offset
            except OSError as err:
                self._on_failure(err)

    def stop(self) -> None:
        """Answer the asyncio puts still waiting (from what was flushed), end their thread."""
        if self._async_commit is not None:
            self._async_commit.stop()

    # --- asyncio: waves, and io_uring -----------------------------------------------------

    def _commit(self) -> AsyncGroupCommit:
        commit = self._async_commit
        if commit is None:
            ring = self._new_ring if self._io_uring else None
            commit = AsyncGroupCommit(self.group, self._timeout_ms, ring=ring)
            self._async_commit = commit
        return commit

    def _new_ring(self, loop: asyncio.AbstractEventLoop) -> RingCommit | None:
        """The io_uring path for ``loop`` (``None`` where io_uring is not usable, or when
        the segment files are not plain files: tests' fault-injecting openers)."""
        segments = self._commitlog.segments
        if segments and type(segments[-1].file) not in (MmapFile, OsFile):
            return None
        ring = FsyncRing.create()
        if ring is None:
            return None
        return RingCommit(
            ring,
            loop,
            self._ring_start,
            self._ring_finish,
            self._on_failure,
            resolve_waves,
            lambda: self.group.flushed_offset,
        )

    def _ring_start(self) -> tuple[list[int], int, object]:
        """Commit the staged appends of every segment written since the last fsync; the
        descriptors to fdatasync, the offset they make durable, and what to finish."""
        last_ts = self._last_store_ts()  # of a record written before the positions are read
        start = self.group.flushed_offset
        targets: list[tuple[Segment, int]] = []
        fds: list[int] = []
        covering = start
        for segment, position in self._commitlog.commit_since(start):
            covering = segment.base_offset + position
            if position > segment.flushed_position:
                file = segment.file
                assert isinstance(file, MmapFile | OsFile)  # as _new_ring checked
                fds.append(file.fileno())
                targets.append((segment, position))
        return fds, covering, _RingToken(targets, last_ts, time.perf_counter())

    def _ring_finish(self, token: object, covering: int) -> None:
        """After the fdatasyncs of ``_ring_start``: record and publish ``covering``."""
        assert isinstance(token, _RingToken)
        if token.targets:
            self.fsync_stats.record(time.perf_counter() - token.started)
        for segment, position in token.targets:
            if position > segment.flushed_position:
                segment.flushed_position = position
        self._publish_flushed(covering, token.last_ts)
        self.group.advance(covering, fsynced=bool(token.targets))


class _RingToken:
    """What ``_ring_finish`` needs of its ``_ring_start``."""

    __slots__ = ("targets", "last_ts", "started")

    def __init__(self, targets: list[tuple[Segment, int]], last_ts: int, started: float) -> None:
        self.targets = targets
        self.last_ts = last_ts
        self.started = started  # perf_counter() before the fdatasyncs were submitted


def _apply(results: list[PutResult], status: tuple[PutStatus, str] | None) -> None:
    if status is not None:
        for result in results:
            result.status, result.detail = status
