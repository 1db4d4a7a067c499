"""``MessageStore``: the store facade — open (lock, load, recover), put, read, flush, close.

Owns the store's state and lifecycle: the put lock, the queue-offset table and idempotency
window recovery hands over, the acknowledgement rule of each flush policy, failing closed
after an I/O error, and the ``lock``/``abort`` files, the checkpoint and the queue-offset
snapshot. The put paths themselves (what happens under the put lock) are ``PutPaths`` in
``store_put.py``, a base class; validation and encoding are ``put.py`` and ``put_plan.py``,
files ``commitlog.py``, the scan ``recovery.py``, fsync timing ``flush.py`` and retention
decisions ``retention.py``.

Acknowledged means durable under the configured policy: SYNC returns ``PUT_OK`` only after an
fsync covered the record (``put`` blocks the calling thread until then; ``put_async`` lets a
coroutine await it, ``async_commit.py``); ASYNC after the record is in the page cache (it
survives a crash of the process; the background flush makes it survive a crash of the machine
within ``flush_interval_ms``).

Failing closed: when a write cannot be undone (a failed append whose bytes could not be
zeroed) or an fsync failed, the store stops accepting puts (``SERVICE_NOT_AVAILABLE``) but
keeps serving reads; reopening runs recovery, which truncates whatever the failure left.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import (
    StoreClosedError,
    StoreIOError,
)
from rmq_spark.store.async_commit import AsyncGroupCommit, AsyncPutPaths
from rmq_spark.store.checkpoint import (
    Checkpoint,
    QueueOffsetSnapshot,
    read_snapshot,
    write_snapshot,
)
from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.fileio import FileOpener, OsOpener
from rmq_spark.store.flush import GroupCommit, Housekeeper, PeriodicTask
from rmq_spark.store.layout import (
    MAX_PROPERTIES_SIZE_BYTES,
    MAX_TOPIC_LENGTH_V1,
)
from rmq_spark.store.lockfile import StoreLock, abort_exists, create_abort, remove_abort
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.put import (
    MAX_RECORD_OVERHEAD_BYTES,
)
from rmq_spark.store.put_lock import PutLock
from rmq_spark.store.reader import read_record
from rmq_spark.store.recovery import RecoveredState, RecoveryReport, recover
from rmq_spark.store.retention import Retention
from rmq_spark.store.warm import SegmentWarmer

__all__ = ["MessageStore"]

_log = logging.getLogger(__name__)


class MessageStore(AsyncPutPaths):
    """A RocketMQ-compatible CommitLog store in ``config.root_dir``. Use ``MessageStore.open``.

    ``put`` and ``put_batch`` come from ``PutPaths`` (``store_put.py``), ``put_async`` and
    ``put_batch_async`` (for coroutines on an event loop) from ``AsyncPutPaths``
    (``async_commit.py``)."""

    def __init__(self, config: StoreConfig, clock: Clock, opener: FileOpener) -> None:
        self.config = config
        self._clock = clock
        self._opener = opener
        self._root = config.root_dir
        self._put_lock = PutLock()
        self._flush_lock = threading.Lock()
        self._closed = False
        self._failure: OSError | None = None
        self._lock: StoreLock | None = None
        self._housekeeper: Housekeeper | None = None
        self._warmer: SegmentWarmer | None = None
        self._async_commit: AsyncGroupCommit | None = None
        self._sync = config.flush_policy is FlushPolicy.SYNC
        self._timeout_ms = config.sync_flush_timeout_ms
        self.store_host = HostAddress.parse(config.store_host)
        self._init_put_paths(config, clock, self.store_host, os.getpid())
        self._published_confirm = -1
        self._published_ts = 0
        self._retention = Retention(config, clock, lambda: self._commitlog, self._put_lock)

    # --- opening ------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        config: StoreConfig,
        clock: Clock | None = None,
        *,
        file_opener: FileOpener | None = None,
    ) -> MessageStore:
        """Open (creating if needed) the store at ``config.root_dir`` and recover it.

        Raises
        ------
        StoreLockedError
            Another ``MessageStore`` or broker has the store open.
        SegmentSizeMismatchError
            A segment file whose length is not ``config.segment_size_bytes`` (a store written
            with another segment size): nothing is changed, the message says which setting
            opens it.
        SegmentLayoutError
            A gap between segments.
        CorruptRecordError
            Recovery found damaged data that is not a torn tail.
        StoreIOError
            The OS refused a file operation.
        """
        store = cls(config, clock or SystemClock(), file_opener or OsOpener(config.io_mode))
        store._root.mkdir(parents=True, exist_ok=True)
        store._lock = StoreLock.acquire(store._root)
        try:
            store._load()
        except OSError as err:
            store._lock.release()
            raise StoreIOError(f"opening store {store._root} failed: {err}") from err
        except BaseException:
            store._lock.release()
            raise
        return store

    def _load(self) -> None:
        config = self.config
        clean = not abort_exists(self._root)
        self._commitlog = CommitLog.load(
            config.commitlog_dir, config.segment_size_bytes, self._opener
        )
        try:
            self._checkpoint = Checkpoint.open(self._root, self._opener)
            durable = self._checkpoint.values.master_flushed_offset
            state = recover(
                self._commitlog,
                durable_offset=durable,
                snapshot=read_snapshot(self._root),
                clean_shutdown=clean,
                check_crc=config.check_crc_on_recover,
                window_capacity=config.idempotency_window_messages,
                max_record_bytes=_max_record_bytes(config),
            )
        except BaseException:
            self._commitlog.close()
            raise
        try:
            self._start(state, durable)
        except BaseException:
            self._checkpoint.close()
            self._commitlog.close()
            raise

    def _start(self, state: RecoveredState, durable: int) -> None:
        """Adopt what recovery found, make it durable and published, and start running."""
        config = self.config
        self.recovery_report: RecoveryReport = state.report
        self._queue_offsets = state.queue_offsets.offsets
        self._window = state.window
        self._window_capacity = max(0, state.window.capacity)
        self._last_record_offset = state.last_record_offset
        self._last_store_ts = state.last_store_timestamp_ms
        end = state.report.end_offset
        # Whatever recovery kept is now made durable and readable before anything is added.
        self._commitlog.mark_unflushed(min(durable, end))
        self._commitlog.flush(min(durable, end))
        values = self._checkpoint.values
        if (values.master_flushed_offset, values.confirm_phy_offset) != (end, end):
            self._checkpoint.reset(end, end)
        self._flushed_offset = end
        self._published_confirm = end
        self._group = GroupCommit(self._flush_and_publish, lambda: self._commitlog.max_offset, end)
        report = state.report
        if report.snapshot_offset != end or report.truncated_bytes:
            self._write_snapshot_locked()
        create_abort(self._root)
        tasks = [
            PeriodicTask("snapshot", config.snapshot_interval_ms, self.snapshot),
            PeriodicTask("retention", config.clean_resource_interval_ms, self._retention_task),
        ]
        if not self._sync:
            tasks.append(PeriodicTask("flush", config.flush_interval_ms, self._flush_task))
            tasks.append(
                PeriodicTask("publish", config.confirm_publish_interval_ms, self._publish_task)
            )
        self._housekeeper = Housekeeper(tasks)
        self._housekeeper.start()
        if self._sync and config.stage_writes:  # like RocketMQ's transientStorePoolEnable
            self._commitlog.start_staging()
        if self._sync and config.warm_ahead_bytes:  # fdatasync is cheaper over written blocks
            self._warmer = SegmentWarmer(self._commitlog, config.warm_ahead_bytes)
            self._warmer.start()

    # --- offsets --------------------------------------------------------------------------------

    @property
    def root_dir(self) -> Path:
        return self._root

    @property
    def commitlog(self) -> CommitLog:
        return self._commitlog

    @property
    def min_offset(self) -> int:
        """Physical offset of the oldest readable byte (base of the oldest segment)."""
        return self._commitlog.min_offset

    @property
    def max_offset(self) -> int:
        """Physical offset where the next record goes (end of the last written record)."""
        return self._commitlog.max_offset

    @property
    def flushed_offset(self) -> int:
        """Physical offset up to which the log is fsynced."""
        return self._group.flushed_offset

    @property
    def confirmed_offset(self) -> int:
        """Up to here readers may read: fsynced (SYNC) or fully written (ASYNC)."""
        return self._group.flushed_offset if self._sync else self._commitlog.max_offset

    def queue_offset(self, topic: str, queue_id: int) -> int:
        """Next queue offset of (``topic``, ``queue_id``) (0 for a queue never written)."""
        return self._queue_offsets.get((topic, queue_id), 0)

    def queue_offsets(self) -> dict[tuple[str, int], int]:
        """A copy of the whole queue-offset table."""
        with self._put_lock:
            return dict(self._queue_offsets)

    @property
    def failure(self) -> OSError | None:
        """The I/O error that made the store fail closed, if any."""
        return self._failure

    # --- read ---------------------------------------------------------------------------------

    def read(self, physical_offset: int) -> MessageRecord:
        """The record stored at ``physical_offset`` (BODYCRC checked).

        Raises
        ------
        OffsetOutOfRangeError
            ``physical_offset`` is outside ``[min_offset, max_offset)`` (or was just deleted).
        CorruptRecordError
            The bytes there are not a valid record starting at ``physical_offset``.
        """
        return self.read_decoded(physical_offset).record

    def read_decoded(self, physical_offset: int) -> DecodedRecord:
        """Like ``read`` but with the record's size and magic version."""
        return read_record(self._commitlog, physical_offset)

    # --- flush, publish, snapshot -------------------------------------------------------------

    def flush(self) -> int:
        """fsync everything written so far (and publish it); returns the flushed offset.

        Raises
        ------
        StoreIOError
            The fsync (or the checkpoint write) failed; the store has failed closed.
        """
        self._check_open()
        try:
            return self._group.flush_now()
        except OSError as err:
            self._fail(err)
            raise StoreIOError(f"flushing store {self._root} failed: {err}") from err

    def _flush_and_publish(self) -> int:
        """fsync the log, then publish the new offsets in the checkpoint (raises ``OSError``).

        The fsync runs outside ``_flush_lock`` so that SYNC group commit can overlap fsyncs;
        publishing is serialised and only ever moves the offsets forward.
        """
        last_ts = self._last_store_ts  # of a record written before the fsync reads positions
        flushed = self._commitlog.flush(self._flushed_offset)
        return self._publish_flushed(flushed, last_ts)

    def _publish_flushed(self, flushed: int, last_ts: int) -> int:
        """Publish ``flushed`` (an fsync covered everything below it; ``last_ts`` is the store
        timestamp of a record written before that fsync started) in the checkpoint; returns
        the flushed offset (raises ``OSError``)."""
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

    def _flush_task(self) -> None:
        try:
            self._group.flush_now()
        except OSError as err:
            self._fail(err)

    def _publish_task(self) -> None:
        """ASYNC: publish the end of the last fully written record as ``confirmPhyOffset``."""
        offset = self._commitlog.max_offset
        if offset > self._published_confirm:
            try:
                with self._flush_lock:
                    if offset > self._published_confirm:
                        self._checkpoint.publish_confirmed(offset)
                        self._published_confirm = offset
            except OSError as err:
                self._fail(err)

    def snapshot(self) -> None:
        """Flush, then write the queue-offset snapshot (so recovery can start from here)."""
        if self._closed or self._failure is not None:
            return
        with self._put_lock:
            snapshot = self._snapshot_locked()
        try:
            self._group.flush_now()
            self._checkpoint.fsync()
            write_snapshot(self._root, snapshot)
        except OSError as err:
            _log.warning("queue-offset snapshot of %s failed: %s", self._root, err)

    def _snapshot_locked(self) -> QueueOffsetSnapshot:
        end = self._commitlog.max_offset
        return QueueOffsetSnapshot(
            physical_offset=end,
            last_record_offset=self._last_record_offset,
            window_start_offset=self._window.start_offset(end),
            queue_offsets=dict(self._queue_offsets),
        )

    def _write_snapshot_locked(self) -> None:
        write_snapshot(self._root, self._snapshot_locked())

    # --- retention ----------------------------------------------------------------------------

    def delete_expired(self) -> list[Path]:
        """One retention round (``retention.py``): delete expired segments, or processed ones
        when the disk is full, or any when it is past the emergency ratio; never the last."""
        self._check_open()
        return self._retention.delete_expired()

    def _retention_task(self) -> None:
        if not self._closed:
            self._retention.delete_expired()

    # --- close --------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"store {self._root} is closed")

    def close(self) -> None:
        """Flush, write the snapshot and checkpoint, remove ``abort``, release the lock.

        After a failure (fail-closed) the ``abort`` file stays, so the next open recovers.
        Idempotent.
        """
        if self._closed:
            return
        with self._put_lock:
            self._closed = True
        if self._housekeeper is not None:
            self._housekeeper.stop()
        if self._warmer is not None:
            self._warmer.stop()
        try:
            if self._failure is None:
                try:
                    self._group.flush_now()
                    self._checkpoint.publish_confirmed(self._commitlog.max_offset)
                    self._checkpoint.fsync()
                    self._write_snapshot_locked()
                    remove_abort(self._root)
                except OSError as err:
                    _log.error(
                        "clean shutdown of %s failed, it will recover on open: %s", self._root, err
                    )
        finally:
            self._stop_async_commit()
            self._checkpoint.close()
            self._commitlog.close()
            if self._lock is not None:
                self._lock.release()

    def _stop_async_commit(self) -> None:
        """Answer the asyncio puts still waiting (from what was flushed) and end their thread."""
        if self._async_commit is not None:
            self._async_commit.stop()

    def abandon(self) -> None:
        """Stop like a killed process: no flush, no snapshot, ``abort`` stays; release files
        and the lock. What was written stays in the page cache, as after a SIGKILL. For tests
        and tools that simulate crashes."""
        if self._closed:
            return
        with self._put_lock:
            self._closed = True
        if self._housekeeper is not None:
            self._housekeeper.stop()
        if self._warmer is not None:
            self._warmer.stop()
        self._stop_async_commit()
        self._checkpoint.close()
        self._commitlog.close()
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MessageStore({self._root}, max_offset={self.max_offset})"


def _max_record_bytes(config: StoreConfig) -> int:
    """The largest record this store can hold (how far recovery looks past a bad record)."""
    largest = (
        config.max_message_size_bytes
        + MAX_RECORD_OVERHEAD_BYTES
        + MAX_PROPERTIES_SIZE_BYTES
        + 4 * MAX_TOPIC_LENGTH_V1
    )
    return min(largest, config.segment_size_bytes)
