"""``Appender``: what happens on a put under the put lock (the other half is ``durability.py``).

Owns the critical section of every put: the store timestamp, physical offset, queue offset and
UNIQ_KEY assigned together, the record written into the active segment (packed straight into
its memory map where it can be) and sealed with its record CRC, the idempotency window, the
last record's offset and timestamp, and failing closed after a write that cannot be undone.
Does not own validation and encoding rules (``put.py``, ``put_plan.py``, ``codec.py``), files
(``commitlog.py``), fsyncs (``durability.py``) or the store's lifecycle (``message_store.py``).

Three ways in, the same bytes (tests check each against ``codec.encode_record``):

* *Template*: a message whose only properties are TAGS and a generated UNIQ_KEY, with IPv4
  hosts, a v1 topic, a ``bytes`` body and default flags (what most producers send): its
  ``put_plan.RecordPlan`` holds everything but the body and the key (``put_plan.Templates``).
* *Raw*: a copy put back with its stored properties string verbatim (``raw_properties``:
  delay redelivery, transaction commit), IPv4 hosts, a v1 topic, a ``bytes`` body, not
  ``idempotent`` (``raw.py`` checks it). Its stale record CRC is replaced.
* *General*: anything else is validated and encoded outside the lock (``put.prepare``), then
  given its offsets and store timestamp and written under it (``prepared.py``).

Template and raw records are ``codec.record_packer`` records and share one batch writer,
``_write_packed``, which encodes a batch column by column (``packed.py``): ``put_batch``,
``put_columns`` (``put_columns.py``) and a raw single put. The single template put packs its
one record itself (the columns of one record would cost a third of a put). A batch takes the
packed writer when all its requests can.

Every write hands the ConsumeQueue dispatcher its records' facts (``cq_pending``,
``cq_facts.py``: offsets, size, queue, TAGS or properties) before they become readable, and
takes them back when it fails, so the dispatcher never reads a record back.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import cast

from rmq_spark.clock import Clock
from rmq_spark.store.codec import OFFSETS, QUEUE_OFFSET_POSITION, RECORD_HOSTS
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.cq_facts import PendingUnits
from rmq_spark.store.crc import crc32
from rmq_spark.store.delay_levels import parse_message_delay_level
from rmq_spark.store.message import LOCALHOST, HostAddress
from rmq_spark.store.packed import (
    PackedColumns,
    Written,
    encode_packed,
    packed_results,
    physical_offsets_of,
    queue_offsets_of,
)
from rmq_spark.store.prepared import (
    complete,
    duplicate_result,
    duplicates_in,
    facts_of,
    prepared_results,
    reject_batch,
    remember,
)
from rmq_spark.store.put import (
    PreparedMessage,
    PutContext,
    PutRequest,
    PutResult,
    PutStatus,
    prepare,
)
from rmq_spark.store.put_columns import MessageColumns, PutBatchReceipt, requests_of
from rmq_spark.store.put_encode import ipv4_of
from rmq_spark.store.put_lock import PutLock
from rmq_spark.store.put_plan import Templates, UniqKeys
from rmq_spark.store.put_state import IdempotencyWindow, WindowEntry
from rmq_spark.store.raw import RawParts
from rmq_spark.store.record_crc import record_crc_tail, seal_record
from rmq_spark.store.recovery import RecoveredState
from rmq_spark.store.segment import Segment

__all__ = ["Appender"]

_log = logging.getLogger(__name__)
_pack_offsets = OFFSETS.pack_into
_pack_i64 = struct.Struct(">q").pack_into
_PUT_OK = PutStatus.PUT_OK
_seal = seal_record
_crc_tail = record_crc_tail
_hosts = RECORD_HOSTS.pack
_TAGS = attrgetter("tags")
_RAW_PROPERTIES = attrgetter("raw_properties")


class Appender:
    """The put lock's critical section of one store (see the module docstring).

    ``append`` and ``append_batch`` write and return results (and, for a batch, the end
    offset an fsync must cover); they never wait for durability. ``start`` adopts what
    recovery found; ``closed``/``failure`` make every later append ``SERVICE_NOT_AVAILABLE``.
    ``on_failure`` is told when a failed write could not be undone (the store fails closed).
    """

    def __init__(
        self,
        config: StoreConfig,
        clock: Clock,
        host: HostAddress,
        pid: int,
        on_failure: Callable[[OSError], None],
    ) -> None:
        self.lock = PutLock()
        self.closed = False
        self.failure: OSError | None = None
        self.commitlog: CommitLog | None = None
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self.window = IdempotencyWindow(0)
        self.last_record_offset = -1
        self.last_store_ts = 0
        self.cq_pending: PendingUnits | None = None
        """The ConsumeQueue dispatcher's facts (``cq_facts.py``): each write hands over its
        records' facts before they become readable, and takes them back if it fails."""
        self._on_failure = on_failure
        self._segment_size = config.segment_size_bytes
        self._window_capacity = 0
        self._crc = config.append_record_crc
        self.msg_id_prefix = (host.packed() + host.port.to_bytes(4, "big")).hex().upper()
        now = clock.now_ms()
        self._uniq_keys = UniqKeys(host.ip, pid, (now * 31 + pid) & 0xFFFFFFFF, now)
        self._clock = clock
        self._now_ms = clock.now_ms
        self._ctx = PutContext(
            max_body_bytes=config.max_message_size_bytes,
            max_delay_level=len(parse_message_delay_level(config.message_delay_level)),
            store_host=host,
            new_uniq_key=lambda: self._uniq_keys.key_at(clock.now_ms()),
            record_crc=self._crc,
        )
        store_ipv4 = ipv4_of(host)
        self._store_host = store_ipv4 or (b"", 0)
        self._store_ip, self._store_port = self._store_host
        # Template and raw records are packed with IPv4 hosts only.
        self._templates = (
            Templates(config.max_message_size_bytes, self._uniq_keys.key_size, self._crc)
            if store_ipv4
            else None
        )
        self._raw = RawParts(config.max_message_size_bytes, self._crc) if store_ipv4 else None

    def start(self, commitlog: CommitLog, state: RecoveredState) -> None:
        """Adopt the recovered log, queue offsets and idempotency window."""
        self.commitlog = commitlog
        self.queue_offsets = state.queue_offsets.offsets
        self.window = state.window
        self._window_capacity = max(0, state.window.capacity)
        self.last_record_offset = state.last_record_offset
        self.last_store_ts = state.last_store_timestamp_ms

    # --- one message ----------------------------------------------------------------------

    def append(self, request: PutRequest) -> PutResult:
        """Write one message (page cache); the outcome is in ``PutResult.status``."""
        # The template path, the packed writer's loop body written out for one record (a
        # list, a loop and a tuple per put cost a third of a put): the record is packed
        # whole, straight into the segment's memory map, under the lock.
        checked = self._templates.check(request) if self._templates is not None else None
        if checked is None:
            return self._append_general(request)
        plan, born_host = checked
        topic = request.topic
        body = request.body
        queue_id = request.queue_id
        born = request.born_timestamp_ms
        body_size = len(body)
        crc = crc32(body) & 0x7FFFFFFF
        size = plan.fixed_size + body_size
        packer, head = plan.shapes.get(body_size) or plan.shape(body_size)
        key = (topic, queue_id)
        lock = self.lock
        if not lock.mutex.acquire(False):
            lock.acquire_contended()
        try:
            if self.failure is not None or self.closed:
                return self.unavailable()
            commitlog = self.commitlog
            assert commitlog is not None
            segment = commitlog.active
            if segment is None or size + 8 > segment.limit - segment.write_position:
                try:
                    segment = commitlog.segment_for_append(size)
                except OSError as err:
                    return _failed(PutStatus.CREATE_MAPPED_FILE_FAILED, "creating a segment", err)
            position = segment.write_position
            physical_offset = segment.base_offset + position
            now = self._now_ms()
            uniq_key = self._uniq_keys.key_at(now)
            queue_offset = self.queue_offsets.get(key, 0)
            hosts = _hosts(
                born_host[0], born_host[1], now, self._store_ip, self._store_port, 0, 0, body_size
            )
            values = (
                head, crc, queue_id, 0, queue_offset, physical_offset, 0,
                now if born is None else born, hosts, body, plan.mid, uniq_key.encode("ascii"),
                plan.after,
            )  # fmt: skip
            record = packer.pack(*values)
            if self._crc:
                record += _crc_tail(record)
            pending = self.cq_pending
            if pending is not None:
                pending.add(
                    (physical_offset, size, topic, queue_id, queue_offset, 0, request.tags, None,
                     now, uniq_key)
                )  # fmt: skip
            mapping = segment.mapping
            if mapping is not None and position + size <= segment.size_bytes:
                mapping[position : position + size] = record
                segment.write_position = position + size
            else:
                try:
                    segment.append(record)
                except OSError as err:
                    self._undo_failed_write(segment, physical_offset, size, err)
                    return _failed(PutStatus.UNKNOWN_ERROR, "writing the record", err)
            self.queue_offsets[key] = queue_offset + 1
            if self._window_capacity:
                self.window.add(
                    topic, uniq_key, (physical_offset, size, queue_offset, queue_id, now)
                )
            self.last_record_offset = physical_offset
            self.last_store_ts = now
        finally:
            lock.mutex.release()
            if lock.parked:
                lock.wake_one()
        return PutResult(
            _PUT_OK,
            physical_offset,
            queue_offset,
            f"{self.msg_id_prefix}{physical_offset:016X}",
            topic,
            queue_id,
            now,
            uniq_key,
            size,
        )

    def _append_general(self, request: PutRequest) -> PutResult:
        """``append`` of any request: a raw copy the packed writer takes, else validated and
        encoded outside the lock (``put.prepare``), then placed and written under it."""
        if self.closed:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, detail="store is closed")
        if request.raw_properties is not None and self._raw is not None:
            columns = self._raw.columns((request,))
            if columns is not None:
                return self._put_packed(columns, None, [request.raw_properties])[0][0]
        prepared = prepare(request, self._ctx, self._clock.now_ms())
        if type(prepared) is PutResult:
            return prepared
        assert isinstance(prepared, PreparedMessage)
        # ``_place`` for one record, written out: its loop and tables cost a sixth of a put.
        buf = prepared.buf
        size = prepared.size
        topic = prepared.topic
        uniq_key = prepared.uniq_key
        key = (topic, prepared.queue_id)
        with self.lock:
            if self.failure is not None or self.closed:
                return self.unavailable()
            if prepared.idempotent and uniq_key is not None:
                entry = self.window.get(topic, uniq_key)
                if entry is not None:
                    return self.duplicate(prepared, entry)  # durable once the first is
            commitlog = self.commitlog
            assert commitlog is not None
            try:
                segment = commitlog.segment_for_append(size)
            except OSError as err:
                return _failed(PutStatus.CREATE_MAPPED_FILE_FAILED, "creating a segment", err)
            physical_offset = segment.base_offset + segment.write_position
            consumes = prepared.consumes_queue_offset
            queue_offset = self.queue_offsets.get(key, 0) if consumes else 0
            now = self._now_ms()
            _pack_offsets(buf, QUEUE_OFFSET_POSITION, queue_offset, physical_offset)
            _pack_i64(buf, prepared.timestamp_position, now)
            if self._crc:
                _seal(buf, 0, size)
            pending = self.cq_pending
            if pending is not None:
                pending.add(
                    (physical_offset, size, topic, prepared.queue_id, queue_offset,
                     prepared.sys_flag, None, prepared.properties, now, None)
                )  # fmt: skip
            try:
                segment.append(buf)
            except OSError as err:
                self._undo_failed_write(segment, physical_offset, size, err)
                return _failed(PutStatus.UNKNOWN_ERROR, "writing the record", err)
            if consumes:
                self.queue_offsets[key] = queue_offset + 1
            if uniq_key is not None:
                self.window.add(
                    topic, uniq_key, (physical_offset, size, queue_offset, prepared.queue_id, now)
                )
            self.last_record_offset = physical_offset
            self.last_store_ts = now
        return PutResult(
            _PUT_OK, physical_offset, queue_offset, f"{self.msg_id_prefix}{physical_offset:016X}",
            prepared.topic, prepared.queue_id, now, uniq_key, prepared.size,
        )  # fmt: skip

    # --- batches --------------------------------------------------------------------------

    def append_batch(self, requests: Sequence[PutRequest]) -> tuple[list[PutResult], int]:
        """Write many messages with one lock acquisition: all or nothing for validity, one
        segment, consecutive queue offsets, idempotent repeats written once. Returns the
        results and the end offset an fsync must cover (0: nothing to wait for)."""
        count = len(requests)
        if not count:
            return [], 0
        if self.closed:
            closed = PutResult(PutStatus.SERVICE_NOT_AVAILABLE, detail="store is closed")
            return [closed] * count, 0
        raw = getattr(requests[0], "raw_properties", None) is not None
        builder = self._raw if raw else self._templates  # a mix: both builders decline it
        columns = builder.columns(requests) if builder is not None else None
        if columns is not None:
            if self.cq_pending is None:
                return self._put_packed(columns, None, None)
            if raw:
                return self._put_packed(columns, None, list(map(_RAW_PROPERTIES, requests)))
            return self._put_packed(columns, list(map(_TAGS, requests)), None)
        now = self._clock.now_ms()
        ctx = self._ctx
        prepared = [prepare(request, ctx, now) for request in requests]
        rejected = reject_batch(prepared)
        if rejected is not None:
            return rejected, 0
        return self._write_prepared(cast("list[PreparedMessage]", prepared))

    def _put_packed(
        self,
        columns: PackedColumns,
        tags: Sequence[str | None] | None,
        properties: Sequence[str | None] | None,
    ) -> tuple[list[PutResult], int]:
        """Template and raw records (``packed.py``) written by ``_write_packed``; returns
        the results and the end offset."""
        written = self._write_packed(columns, tags, properties)
        if isinstance(written, list):
            return written, 0
        results = packed_results(columns, written, self.msg_id_prefix)
        return results, written.physical_offsets[-1] + columns.sizes[-1]

    def append_columns(self, columns: MessageColumns) -> PutBatchReceipt:
        """``append_batch`` of messages given as columns, answered with one receipt; the
        packed writer takes them when it can, else the general path (same checks)."""
        n = len(columns.bodies)
        if self.closed:
            return PutBatchReceipt(PutStatus.SERVICE_NOT_AVAILABLE, detail="store is closed")
        if not n:
            return PutBatchReceipt(_PUT_OK)
        packed = None
        if self._templates is not None and not columns.has_properties:
            packed = self._templates.from_columns(
                columns.topics, columns.queue_ids, columns.bodies, columns.tags,
                columns.born_timestamps_ms, [LOCALHOST] * n,
            )  # fmt: skip
        if packed is None:
            return PutBatchReceipt.of_results(self.append_batch(requests_of(columns))[0])
        written = self._write_packed(packed, columns.tags, None)
        if isinstance(written, list):
            return PutBatchReceipt.of_results(written)
        return PutBatchReceipt(
            _PUT_OK, written.physical_offsets, written.queue_offsets, list(written.uniq_keys),
            list(packed.sizes), written.now,
        )  # fmt: skip

    def _write_packed(
        self,
        columns: PackedColumns,
        tags: Sequence[str | None] | None,
        properties: Sequence[str | None] | None,
    ) -> Written | list[PutResult]:
        """Encode and copy a batch into the segment under one lock acquisition: where it
        went, or the failed results. ``tags`` or ``properties``: each record's TAGS (a
        template batch) or stored properties (raw), for the ConsumeQueue facts."""
        count = len(columns.sizes)
        total = columns.total
        if total + 8 > self._segment_size:
            detail = f"batch of {total} bytes does not fit a segment"
            return [PutResult(PutStatus.MESSAGE_ILLEGAL, detail=detail)] * count
        lock = self.lock
        if not lock.mutex.acquire(False):
            lock.acquire_contended()
        try:
            if self.failure is not None or self.closed:
                return [self.unavailable()] * count
            where = self._batch_target(total, count)
            if isinstance(where, list):
                return where
            segment, position = where
            offsets = physical_offsets_of(columns, segment.base_offset + position)
            now = self._now_ms()
            queue_offsets, pending = queue_offsets_of(columns, self.queue_offsets)
            uniq_keys = columns.uniq_keys
            generated = uniq_keys is None
            if uniq_keys is None:
                uniq_keys = self._uniq_keys.keys_at(now, count)
                key_bytes: Sequence[bytes] = list(map(str.encode, uniq_keys))
            else:
                key_bytes = [b""] * count
            data = encode_packed(
                columns, offsets, queue_offsets, key_bytes, now, self._store_host, self._crc
            )
            cq_pending = self.cq_pending
            if cq_pending is not None:
                cq_pending.add(
                    (offsets, columns.sizes, columns.topics, columns.queue_ids, queue_offsets,
                     columns.sys_flags, tags, properties, now, uniq_keys)
                )  # fmt: skip
            failed = self._write_batch(segment, position, data, count)
            if failed is not None:
                return failed
            self.queue_offsets.update(pending)
            if self._window_capacity:
                self._remember(columns, offsets, queue_offsets, uniq_keys, now, generated)
            self.last_record_offset = offsets[-1]
            self.last_store_ts = now
        finally:
            lock.mutex.release()
            if lock.parked:
                lock.wake_one()
        return Written(offsets, queue_offsets, uniq_keys, now)

    def _remember(
        self,
        columns: PackedColumns,
        offsets: list[int],
        queue_offsets: list[int],
        uniq_keys: Sequence[str | None],
        now: int,
        generated: bool,
    ) -> None:
        """Lock held: add the batch's records that carry a UNIQ_KEY to the window;
        ``generated``: the keys are one ``UniqKeys.keys_at`` call's."""
        topics = columns.topics
        if generated and topics.count(topics[0]) == len(topics):
            fields = (offsets, columns.sizes, queue_offsets, columns.queue_ids)
            self.window.add_block(topics[0], cast("list[str]", uniq_keys), fields, now)
            return
        add = self.window.add
        for topic, uniq_key, offset, size, queue_offset, queue_id in zip(
            topics, uniq_keys, offsets, columns.sizes, queue_offsets, columns.queue_ids,
            strict=True,
        ):  # fmt: skip
            if uniq_key is not None:
                add(topic, uniq_key, (offset, size, queue_offset, queue_id, now))

    def _batch_target(self, total: int, count: int) -> tuple[Segment, int] | list[PutResult]:
        """Lock held: the segment ``total`` bytes go to and its write position; failed
        results if no segment could be created."""
        commitlog = self.commitlog
        assert commitlog is not None
        segment = commitlog.active
        if segment is None or total + 8 > segment.limit - segment.write_position:
            try:
                segment = commitlog.segment_for_append(total)
            except OSError as err:
                failed = _failed(PutStatus.CREATE_MAPPED_FILE_FAILED, "creating a segment", err)
                return [failed] * count
        return segment, segment.write_position

    def _write_batch(
        self, segment: Segment, position: int, data: bytes, count: int
    ) -> list[PutResult] | None:
        """Lock held: write ``data`` at the segment's write position and advance it; failed
        results if the write failed (the segment is then restored by ``_undo_failed_write``).
        ``Segment.append`` chooses the way in (a batch of a page or more: the descriptor)."""
        try:
            segment.append(data)
        except OSError as err:
            self._undo_failed_write(segment, segment.base_offset + position, len(data), err)
            return [_failed(PutStatus.UNKNOWN_ERROR, "writing the batch", err)] * count
        return None

    def _write_prepared(self, messages: list[PreparedMessage]) -> tuple[list[PutResult], int]:
        """Place, complete (offsets, store timestamp, record CRC) and write pre-encoded
        records under one lock acquisition; idempotent repeats are answered, not written."""
        count = len(messages)
        total = sum(message.size for message in messages)
        if total + 8 > self._segment_size:
            detail = f"batch of {total} bytes does not fit a segment"
            return [PutResult(PutStatus.MESSAGE_ILLEGAL, detail=detail)] * count, 0
        with self.lock:
            if self.failure is not None or self.closed:
                return [self.unavailable()] * count, 0
            copies = duplicates_in(messages, self.window)
            writes = [m for m in messages if id(m) not in copies] if copies else messages
            placed: dict[int, tuple[int, int]] = {}
            now = self._now_ms()
            if writes:
                placed_or_failed = self._place(writes, now)
                if isinstance(placed_or_failed, PutResult):
                    return [placed_or_failed] * count, 0
                placed = placed_or_failed
        return prepared_results(messages, copies, placed, self.msg_id_prefix, now)

    def _place(
        self, writes: list[PreparedMessage], now: int
    ) -> dict[int, tuple[int, int]] | PutResult:
        """Lock held: complete and write ``writes``: where each went, or a failed result."""
        size = sum(message.size for message in writes)
        commitlog = self.commitlog
        assert commitlog is not None
        try:
            segment = commitlog.segment_for_append(size)
        except OSError as err:
            return _failed(PutStatus.CREATE_MAPPED_FILE_FAILED, "creating a segment", err)
        base = segment.base_offset + segment.write_position
        buf, placed, pending = complete(writes, base, now, self.queue_offsets, self._crc)
        cq_pending = self.cq_pending
        if cq_pending is not None:
            cq_pending.add(facts_of(writes, placed, now))
        try:
            segment.append(buf)
        except OSError as err:
            self._undo_failed_write(segment, base, size, err)
            return _failed(PutStatus.UNKNOWN_ERROR, "writing the batch", err)
        self.queue_offsets.update(pending)
        remember(self.window, writes, placed, now)
        self.last_record_offset = base + size - writes[-1].size
        self.last_store_ts = now
        return placed

    # --- outcomes -------------------------------------------------------------------------

    def duplicate(self, message: PreparedMessage, entry: WindowEntry) -> PutResult:
        """The result of an idempotent repeat: the first copy's (durable once it is)."""
        return duplicate_result(message, entry, self.msg_id_prefix)

    def unavailable(self) -> PutResult:
        if self.closed:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, detail="store is closed")
        return PutResult(
            PutStatus.SERVICE_NOT_AVAILABLE,
            detail=f"store failed closed after an I/O error: {self.failure}; reopen it",
        )

    def _undo_failed_write(
        self, segment: Segment, physical_offset: int, size: int, err: OSError
    ) -> None:
        """Take back the ConsumeQueue facts of the write at ``physical_offset`` and zero
        what it may have left; if even that fails, fail closed."""
        pending = self.cq_pending
        if pending is not None:
            pending.drop_from(physical_offset)
        commitlog = self.commitlog
        _log.error("append failed at %s: %s", commitlog and commitlog.max_offset, err)
        try:
            segment.discard_after_failed_write(size)
        except OSError as undo_err:
            self._on_failure(undo_err)


def _failed(status: PutStatus, what: str, err: OSError) -> PutResult:
    return PutResult(status, detail=f"{what} failed: {err}")
