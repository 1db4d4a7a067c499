"""``MessageStore``: the store facade — open (lock, load, recover), put, read, flush, close.

Owns the store's lifecycle and public face: the ``lock``/``abort`` files, the checkpoint and
the queue-offset snapshot, failing closed after an I/O error, and the two collaborators a put
goes through: ``Appender`` (``appender.py``: the put lock's critical section, the record
written) and ``Durability`` (``durability.py``: the fsync a SYNC put waits for). Validation
and encoding are ``put.py``, ``put_plan.py`` and ``codec.py``, files ``commitlog.py``, the
scan ``recovery.py`` and retention decisions ``retention.py``. The broker's ConsumeQueues
(``consumequeue/``, ``consume_queues``) are ``cq_service.py``'s: the store starts, wakes and
stops them.

Acknowledged means durable under the configured policy: SYNC returns ``PUT_OK`` only after an
fsync covered the record (``put`` blocks the calling thread until then; ``put_async`` lets a
coroutine await it: ``async_puts.py``, ``async_commit.py``); ASYNC after the record is in the
page cache (it survives a crash of the process; the background flush makes it survive a crash
of the machine within ``flush_interval_ms``).

Failing closed: when a write cannot be undone (a failed append whose bytes could not be
zeroed) or an fsync failed, the store stops accepting puts (``SERVICE_NOT_AVAILABLE``) but
keeps serving reads; reopening runs recovery, which truncates whatever the failure left.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import (
    StoreClosedError,
    StoreError,
    StoreIOError,
)
from rmq_spark.store.appender import Appender
from rmq_spark.store.async_puts import BATCH_BYTES_MAX, AsyncPuts
from rmq_spark.store.checkpoint import (
    Checkpoint,
    QueueOffsetSnapshot,
    read_snapshot,
    write_snapshot,
)
from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.consume_queues import ConsumeQueues
from rmq_spark.store.cq_recovery import CqRecovery
from rmq_spark.store.cq_service import ConsumeQueueService
from rmq_spark.store.durability import Durability
from rmq_spark.store.fileio import FileOpener, OsOpener
from rmq_spark.store.flush import Housekeeper, PeriodicTask
from rmq_spark.store.latency import LatencySnapshot
from rmq_spark.store.layout import (
    MAX_PROPERTIES_SIZE_BYTES,
    MAX_TOPIC_LENGTH_V1,
)
from rmq_spark.store.lockfile import StoreLock, abort_exists, create_abort, remove_abort
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.put import MAX_RECORD_OVERHEAD_BYTES, PutRequest, PutResult, PutStatus
from rmq_spark.store.put_columns import MessageColumns, PutBatchReceipt, arrow_columns
from rmq_spark.store.reader import read_record
from rmq_spark.store.recovery import RecoveredState, RecoveryReport, recover
from rmq_spark.store.replica_log import ReplicaLog
from rmq_spark.store.retention import Retention
from rmq_spark.store.warm import SegmentWarmer

__all__ = ["MessageStore"]

_log = logging.getLogger(__name__)
_PUT_OK = PutStatus.PUT_OK


class MessageStore:
    """A RocketMQ-compatible CommitLog store in ``config.root_dir``. Use ``MessageStore.open``.

    A put is ``Appender.append`` (the record written under the put lock), then, under SYNC,
    ``Durability.wait`` (the fsync that covers it)."""

    def __init__(self, config: StoreConfig, clock: Clock, opener: FileOpener) -> None:
        self.config = config
        self._clock = clock
        self._opener = opener
        self._root = config.root_dir
        self._lock: StoreLock | None = None
        self._housekeeper: Housekeeper | None = None
        self._warmer: SegmentWarmer | None = None
        self._sync = config.flush_policy is FlushPolicy.SYNC
        self.store_host = HostAddress.parse(config.store_host)
        self._appender = Appender(config, clock, self.store_host, os.getpid(), self._fail)
        self._put_lock = self._appender.lock
        self._durability: Durability | None = None
        self._retention = Retention(config, clock, lambda: self._commitlog, self._put_lock)
        self._cq: ConsumeQueueService | None = None
        self._after_write: Callable[[], None] | None = None  # ASYNC: wakes the CQ dispatcher
        settle = (
            (lambda results, end: self._durable.wait_async(results, end)) if self._sync else None
        )
        batch_bytes = min(BATCH_BYTES_MAX, config.segment_size_bytes // 4)
        self._async_puts = AsyncPuts(self._appender, settle, lambda: self._after_write, batch_bytes)

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
        self._appender.start(self._commitlog, state)
        end = state.report.end_offset
        # Whatever recovery kept is now made durable and readable before anything is added.
        self._commitlog.mark_unflushed(min(durable, end))
        self._commitlog.flush(min(durable, end))
        values = self._checkpoint.values
        if (values.master_flushed_offset, values.confirm_phy_offset) != (end, end):
            self._checkpoint.reset(end, end)
        appender = self._appender
        self._durability = Durability(
            config,
            self._commitlog,
            self._checkpoint,
            end,
            lambda: appender.last_store_ts,
            self._fail,
        )
        report = state.report
        if report.snapshot_offset != end or report.truncated_bytes:
            self._write_snapshot_locked()
        create_abort(self._root)
        tasks = [
            PeriodicTask("snapshot", config.snapshot_interval_ms, self.snapshot),
            PeriodicTask("retention", config.clean_resource_interval_ms, self._retention_task),
        ]
        if not self._sync:
            durability = self._durability
            tasks.append(PeriodicTask("flush", config.flush_interval_ms, durability.flush_task))
            tasks.append(
                PeriodicTask("publish", config.confirm_publish_interval_ms, durability.publish_task)
            )
        if config.consume_queue:
            self._cq = cq = ConsumeQueueService.start(
                config, self._commitlog, state, self._confirmed, self._checkpoint
            )
            self.consume_queue_recovery: CqRecovery = cq.recovery
            self._appender.cq_pending = cq.pending
            if self._sync:  # the acknowledged end moves with the group commit's fsyncs
                self._durable.group.on_advance = cq.wake
            else:  # with each write
                self._after_write = cq.wake
            tasks.append(PeriodicTask("cq-flush", config.consume_queue_flush_interval_ms, cq.flush))
        self._housekeeper = Housekeeper(tasks)
        self._housekeeper.start()
        if self._sync and config.stage_writes:  # like RocketMQ's transientStorePoolEnable
            self._commitlog.start_staging()
        if self._sync and config.warm_ahead_bytes:  # fdatasync is cheaper over written blocks
            self._warmer = SegmentWarmer(self._commitlog, config.warm_ahead_bytes)
            self._warmer.start()

    @property
    def consume_queues(self) -> ConsumeQueues:
        """The store's ConsumeQueues (``consume_queues.py``), fed by the dispatch thread.

        Raises
        ------
        StoreClosedError
            The store is closed.
        StoreError
            ``store.consume_queue`` is off.
        """
        self._check_open()
        if self._cq is None:
            raise StoreError(f"store {self._root}: store.consume_queue is off")
        return self._cq.queues

    def _confirmed(self) -> int:
        return self.confirmed_offset

    # --- put ------------------------------------------------------------------------------

    def put(self, request: PutRequest) -> PutResult:
        """Store one message; the outcome is in ``PutResult.status`` (never an exception for a
        bad message or a full disk). Under SYNC, returns once an fsync covered the record
        (or with ``FLUSH_DISK_TIMEOUT`` after ``sync_flush_timeout_ms``)."""
        result = self._appender.append(request)
        if self._sync and result.status is _PUT_OK:
            return self._durable.wait(result)
        if self._after_write is not None:
            self._after_write()
        return result

    def put_batch(self, requests: Sequence[PutRequest]) -> list[PutResult]:
        """Store many messages with one lock acquisition and one write.

        All or nothing for validity: if any message is illegal, none is stored (each result
        says why). The batch goes into one segment (BLANK and a new segment first if it does
        not fit); each (topic, queue id) gets consecutive queue offsets. Idempotent messages
        already in the window, or repeated inside the batch, are written once. Under SYNC,
        returns once one fsync covered the whole batch.
        """
        results, end = self._appender.append_batch(requests)
        if self._sync and end:
            self._durable.wait_batch(results, end)
        elif self._after_write is not None:
            self._after_write()
        return results

    def put_columns(
        self,
        topic: str | Sequence[str],
        body: Sequence[bytes],
        queue_id: int | Sequence[int] = 0,
        *,
        tags: str | Sequence[str | None] | None = None,
        born_timestamp_ms: Sequence[int | None] | None = None,
        properties: Sequence[Mapping[str, str] | None] | None = None,
    ) -> PutBatchReceipt:
        """``put_batch`` of messages given as columns (``put_columns.MessageColumns.of``: a
        scalar topic, queue id or TAGS is every message's), answered with one receipt
        instead of a result per message. Same rules, bytes and guarantees as ``put_batch``:
        all or nothing, ``receipt.detail`` naming the message that sank the batch."""
        columns = MessageColumns.of(topic, body, queue_id, tags, born_timestamp_ms, properties)
        return self._put_columns(columns)

    def put_arrow(self, table: Any) -> PutBatchReceipt:
        """``put_columns`` of a ``pyarrow.Table`` or ``RecordBatch`` whose columns are named
        as ``put_columns.ARROW_FIELDS`` (``topic`` and ``body`` required)."""
        return self._put_columns(arrow_columns(table))

    def _put_columns(self, columns: MessageColumns) -> PutBatchReceipt:
        receipt = self._appender.append_columns(columns)
        if self._after_write is not None:
            self._after_write()
        if self._sync and receipt.ok and receipt.physical_offsets:
            probe = [PutResult(_PUT_OK)]
            self._durable.wait_batch(probe, receipt.end_offset)
            receipt.status, receipt.detail = probe[0].status, probe[0].detail
        return receipt

    async def put_async(self, request: PutRequest) -> PutResult:
        """``put`` for a coroutine on an event loop: written with the other puts of the loop
        pass as one batch (``async_puts.py``); under SYNC the coroutine then awaits the fsync
        that covers it, the loop staying free. Same statuses as ``put``."""
        return await self._async_puts.put(request)

    async def put_many_async(self, requests: Sequence[PutRequest]) -> list[PutResult | StoreError]:
        """``put_async`` of each, awaited together: its result or the ``StoreError`` it raised."""
        return await self._async_puts.put_all(requests)

    async def put_batch_async(self, requests: Sequence[PutRequest]) -> list[PutResult]:
        """``put_batch`` for a coroutine (see ``put_async``)."""
        return await self._async_puts.put_batch(requests)

    def replica_log(self) -> ReplicaLog:
        """A slave's way in (``replica_log.py``): a master's bytes appended as they are, made
        durable per this store's flush policy (SYNC: fsynced before the next report)."""
        self._check_open()
        wake = self._after_write if not self._sync else self.flush
        return ReplicaLog(self._appender, self._commitlog, wake or (lambda: None))

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
        return self._durable.flushed_offset

    @property
    def confirmed_offset(self) -> int:
        """Up to here readers may read: fsynced (SYNC) or fully written (ASYNC)."""
        return self._durable.flushed_offset if self._sync else self._commitlog.max_offset

    def queue_offset(self, topic: str, queue_id: int) -> int:
        """Next queue offset of (``topic``, ``queue_id``) (0 for a queue never written)."""
        return self._appender.queue_offsets.get((topic, queue_id), 0)

    def queue_offsets(self) -> dict[tuple[str, int], int]:
        """A copy of the whole queue-offset table."""
        with self._put_lock:
            return dict(self._appender.queue_offsets)

    @property
    def fsync_stats(self) -> LatencySnapshot:
        """Durations of the fsyncs that made new records durable (for the broker's metrics)."""
        return self._durable.fsync_stats.snapshot()

    @property
    def failure(self) -> OSError | None:
        """The I/O error that made the store fail closed, if any."""
        return self._appender.failure

    @property
    def _closed(self) -> bool:
        return self._appender.closed

    @property
    def _durable(self) -> Durability:
        durability = self._durability
        if durability is None:
            raise StoreClosedError(f"store {self._root} is not open")
        return durability

    def _fail(self, err: OSError) -> None:
        """Fail closed: refuse every later put, fail every waiting and later flush."""
        if self._appender.failure is None:
            _log.error("store %s fails closed: %s", self._root, err)
            self._appender.failure = err
            if self._durability is not None:
                self._durability.fail(err)

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
            return self._durable.flush_now()
        except OSError as err:
            self._fail(err)
            raise StoreIOError(f"flushing store {self._root} failed: {err}") from err

    def snapshot(self) -> None:
        """Flush, then write the queue-offset snapshot (so recovery can start from here)."""
        if self._closed or self.failure is not None:
            return
        with self._put_lock:
            snapshot = self._snapshot_locked()
        try:
            self._durable.flush_now()
            self._checkpoint.fsync()
            write_snapshot(self._root, snapshot)
        except OSError as err:
            _log.warning("queue-offset snapshot of %s failed: %s", self._root, err)

    def _snapshot_locked(self) -> QueueOffsetSnapshot:
        end = self._commitlog.max_offset
        return QueueOffsetSnapshot(
            physical_offset=end,
            last_record_offset=self._appender.last_record_offset,
            window_start_offset=self._appender.window.start_offset(end),
            queue_offsets=dict(self._appender.queue_offsets),
        )

    def _write_snapshot_locked(self) -> None:
        write_snapshot(self._root, self._snapshot_locked())

    # --- retention ----------------------------------------------------------------------------

    def delete_expired(self) -> list[Path]:
        """One retention round (``retention.py``): delete expired segments, or processed ones
        when the disk is full, or any when it is past the emergency ratio; never the last."""
        self._check_open()
        deleted = self._retention.delete_expired()
        if deleted and self._cq is not None:
            self._cq.delete_below(self._commitlog.min_offset)
        return deleted

    def _retention_task(self) -> None:
        if not self._closed:
            self.delete_expired()

    # --- close --------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"store {self._root} is closed")

    def close(self) -> None:
        """Flush, write the snapshot and checkpoint, remove ``abort``, release the lock.

        After a failure (fail-closed) the ``abort`` file stays, so the next open recovers.
        Idempotent.
        """
        self._stop(clean=True)

    def abandon(self) -> None:
        """Stop like a killed process: no flush, no snapshot, ``abort`` stays; release files
        and the lock. What was written stays in the page cache, as after a SIGKILL. For tests
        and tools that simulate crashes."""
        self._stop(clean=False)

    def _stop(self, clean: bool) -> None:
        if self._closed:
            return
        with self._put_lock:
            self._appender.closed = True
        if self._housekeeper is not None:
            self._housekeeper.stop()
        if self._warmer is not None:
            self._warmer.stop()
        try:
            if clean and self.failure is None:
                try:
                    self._durable.flush_now()
                    self._checkpoint.publish_confirmed(self._commitlog.max_offset)
                    self._checkpoint.fsync()
                    self._write_snapshot_locked()
                    self._stop_consume_queues(flush=True)
                    remove_abort(self._root)
                except OSError as err:
                    _log.error(
                        "clean shutdown of %s failed, it will recover on open: %s", self._root, err
                    )
        finally:
            self._stop_consume_queues(flush=False)
            # Answer the asyncio puts still waiting (from what was flushed), end their thread.
            self._durable.stop()
            self._checkpoint.close()
            self._commitlog.close()
            if self._lock is not None:
                self._lock.release()

    def _stop_consume_queues(self, flush: bool) -> None:
        """Stop dispatching (after a last round) and flush or just close ``consumequeue/``
        (raises ``OSError`` when ``flush``)."""
        cq = self._cq
        if cq is not None:
            self._cq = None
            self._after_write = None
            self._durable.group.on_advance = None
            cq.stop(flush=flush)

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
