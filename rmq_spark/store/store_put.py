"""The put paths of ``MessageStore``: ``put`` and ``put_batch``, fast and general.

Owns what happens between a ``PutRequest`` and its ``PutResult``: the choice of path, the put
lock's critical section (store timestamp, physical offset, queue offset and UNIQ_KEY assigned
together, the record written), the idempotency window updates, failing closed after a write
that cannot be undone, and the wait for durability under SYNC. Does not own validation and
encoding rules (``put.py``, ``put_plan.py``), files (``commitlog.py``), fsync timing
(``flush.py``) or the store's lifecycle (``message_store.py``).

Three paths, the same bytes (tests check each against ``codec.encode_record``):

* *Fast*: a message whose only properties are TAGS and a generated UNIQ_KEY, with IPv4
  hosts, a v1 topic, a ``bytes`` body and default flags (what most producers send). The whole
  record is packed with one ``struct.pack_into`` straight into the segment's memory map under
  the lock (``put_plan.RecordPlan``): no intermediate buffer, no patching.
* *Raw*: a copy put back with its stored properties string verbatim (``raw_properties``:
  delay redelivery, transaction commit), IPv4 hosts, a v1 topic, a ``bytes`` body, not
  ``idempotent``: checked outside the lock, packed whole under it (``store_put_raw.py``).
* *General*: anything else is validated and encoded outside the lock (``put.prepare``), then
  patched with its offsets and store timestamp and written under it.

A batch takes a fast path when all its requests do (all template or all raw).

``PutPaths`` is a base class of ``MessageStore``: it sets up its own state
(``_init_put_paths``) and uses the store's shared state declared below.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

from rmq_spark.clock import Clock
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.delay_levels import parse_message_delay_level
from rmq_spark.store.flush import FlushWait, GroupCommit
from rmq_spark.store.layout import MESSAGE_MAGIC_CODE_V1
from rmq_spark.store.message import LOCALHOST, HostAddress
from rmq_spark.store.put import (
    LOCALHOST_IPV4,
    IdempotencyWindow,
    PreparedMessage,
    PutContext,
    PutRequest,
    PutResult,
    PutStatus,
    WindowEntry,
    check_topic,
    duplicates_in,
    ipv4_of,
    prepare,
    reject_batch,
)
from rmq_spark.store.put_lock import PutLock
from rmq_spark.store.put_plan import RecordPlan, UniqKeys, record_plan
from rmq_spark.store.store_put_raw import RawPutPaths

__all__ = ["PutPaths"]

_log = logging.getLogger(__name__)
_OFFSETS = struct.Struct(">qq")  # QUEUEOFFSET @20 and PHYSICALOFFSET @28 are adjacent
_I64 = struct.Struct(">q")
_pack_offsets = _OFFSETS.pack_into
_pack_i64 = _I64.pack_into
_QUEUE_OFFSET_POSITION = 20
_SIZE = struct.Struct(">i")
_I32_MAX = (1 << 31) - 1
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_ZERO = 0
_PUT_OK = PutStatus.PUT_OK
_PLANS_MAX = 4096
# (topic, queue_id, body, born_timestamp_ms, born_host, plan, packer, body_crc, size)
_FastParts = tuple[
    str, int, bytes, "int | None", tuple[bytes, int], RecordPlan, struct.Struct, int, int
]
_crc32 = zlib.crc32
_ipv4 = ipv4_of
_LOCALHOST_IPV4 = LOCALHOST_IPV4


class PutPaths(RawPutPaths):
    """``put`` and ``put_batch`` of ``MessageStore`` (see the module docstring)."""

    # The store's state these paths share with it (set up by ``MessageStore``).
    config: StoreConfig
    _clock: Clock
    _put_lock: PutLock
    _closed: bool
    _failure: OSError | None
    _sync: bool
    _timeout_ms: int
    _commitlog: CommitLog
    _queue_offsets: dict[tuple[str, int], int]
    _window: IdempotencyWindow
    _window_capacity: int
    _last_record_offset: int
    _last_store_ts: int
    _group: GroupCommit
    _root: Path

    def _init_put_paths(
        self, config: StoreConfig, clock: Clock, host: HostAddress, pid: int
    ) -> None:
        """Set up the put paths' own state (``MessageStore.__init__`` calls this)."""
        self._msg_id_prefix = (host.packed() + _SIZE.pack(host.port)).hex().upper()
        now = clock.now_ms()
        self._uniq_keys = UniqKeys(host.ip, pid, (now * 31 + pid) & 0xFFFFFFFF, now)
        self._ctx = PutContext(
            max_body_bytes=config.max_message_size_bytes,
            max_delay_level=len(parse_message_delay_level(config.message_delay_level)),
            store_host=host,
            new_uniq_key=lambda: self._uniq_keys.key_at(clock.now_ms()),
        )
        self._now_ms = clock.now_ms
        self._max_body_bytes = config.max_message_size_bytes
        self._plans: dict[object, RecordPlan | None] = {}
        store_ipv4 = _ipv4(host)
        self._fast_path = store_ipv4 is not None  # the fast path needs an IPv4 store host
        self._store_ip, self._store_port = store_ipv4 or (b"", 0)
        self._init_raw_put_paths()

    def put(self, request: PutRequest) -> PutResult:
        """Store one message; the outcome is in ``PutResult.status`` (never an exception for a
        bad message or a full disk). Under SYNC, returns once an fsync covered the record
        (or with ``FLUSH_DISK_TIMEOUT`` after ``sync_flush_timeout_ms``)."""
        result = self._append(request)
        if self._sync and result.status is _PUT_OK:
            return self._await(result)
        return result

    def _append(self, request: PutRequest) -> PutResult:
        """``put`` without the wait for durability: the record is written (page cache) when
        the result is ``PUT_OK``; under SYNC the caller waits for an fsync to cover it."""
        # The fast path: a message with no properties but TAGS, a generated UNIQ_KEY, IPv4
        # hosts, a v1 topic and default flags is packed whole, straight into the segment's
        # memory map, under the lock (put_plan.py). Anything else takes ``_put_general``;
        # tests check that both write the same bytes. The checks are ``_fast_parts``'s,
        # inlined: a call and a tuple cost 6 % of a put.
        topic = request.topic
        tags = request.tags
        try:
            plan = self._plans[(topic, tags) if tags else topic]
        except (KeyError, TypeError):
            plan = self._plan(topic, tags)
        body = request.body
        queue_id = request.queue_id
        born = request.born_timestamp_ms
        host = request.born_host
        born_host = _LOCALHOST_IPV4 if host is LOCALHOST else _ipv4(host)
        if (
            plan is None
            or born_host is None
            or request.properties
            or request.raw_properties is not None
            or request.keys
            or type(body) is not bytes
            or len(body) > self._max_body_bytes
            or type(queue_id) is not int
            or not 0 <= queue_id <= _I32_MAX
            or (born is not None and (type(born) is not int or not _I64_MIN <= born <= _I64_MAX))
            # ``is`` the interned int 0: anything else (another int, a bool, a float, None)
            # goes to the general path, which stores or rejects it.
            or request.flag is not _ZERO
            or request.sys_flag is not _ZERO
            or request.reconsume_times is not _ZERO
            or request.prepared_transaction_offset is not _ZERO
        ):
            return self._put_general(request)
        body_size = len(body)
        crc = _crc32(body) & 0x7FFFFFFF
        size = plan.fixed_size + body_size
        packer = plan.packers.get(body_size) or plan.packer(body_size)
        key = (topic, queue_id)
        lock = self._put_lock
        if not lock.mutex.acquire(False):
            lock.acquire_contended()
        try:
            if self._failure is not None or self._closed:
                return self._unavailable()
            segment = self._commitlog.active
            if segment is None or size + 8 > segment.limit - segment.write_position:
                try:
                    segment = self._commitlog.segment_for_append(size)
                except OSError as err:
                    return _failed(PutStatus.CREATE_MAPPED_FILE_FAILED, "creating a segment", err)
            position = segment.write_position
            physical_offset = segment.base_offset + position
            now = self._now_ms()
            uniq_key = self._uniq_keys.key_at(now)
            queue_offset = self._queue_offsets.get(key, 0)
            values = (
                size,
                MESSAGE_MAGIC_CODE_V1,
                crc,
                queue_id,
                0,
                queue_offset,
                physical_offset,
                0,
                now if born is None else born,
                born_host[0],
                born_host[1],
                now,
                self._store_ip,
                self._store_port,
                0,
                0,
                body_size,
                body,
                plan.before,
                uniq_key.encode("ascii"),
                plan.after,
            )
            mapping = segment.mapping
            if mapping is not None and position + size <= segment.size_bytes:
                packer.pack_into(mapping, position, *values)
                segment.write_position = position + size
            else:
                try:
                    segment.append(packer.pack(*values))
                except OSError as err:
                    self._undo_failed_write(segment, size, err)
                    return _failed(PutStatus.UNKNOWN_ERROR, "writing the record", err)
            self._queue_offsets[key] = queue_offset + 1
            if self._window_capacity:
                self._window.add(
                    topic, uniq_key, (physical_offset, size, queue_offset, queue_id, now)
                )
            self._last_record_offset = physical_offset
            self._last_store_ts = now
        finally:
            lock.mutex.release()
            if lock.parked:
                lock.wake_one()
        result = PutResult(
            _PUT_OK,
            physical_offset,
            queue_offset,
            f"{self._msg_id_prefix}{physical_offset:016X}",
            topic,
            queue_id,
            now,
            uniq_key,
            size,
        )
        return result

    def _fast_parts(self, request: PutRequest) -> _FastParts | None:
        """What the fast path needs to write ``request``, or ``None`` if it cannot: the
        request must have no properties but TAGS (so its UNIQ_KEY is generated), IPv4 hosts,
        a v1 topic, a ``bytes`` body within the limit and default flags (``put_plan.py``)."""
        topic = request.topic
        tags = request.tags
        try:
            plan = self._plans[(topic, tags) if tags else topic]
        except (KeyError, TypeError):
            plan = self._plan(topic, tags)
        body = request.body
        queue_id = request.queue_id
        born = request.born_timestamp_ms
        host = request.born_host
        born_host = _LOCALHOST_IPV4 if host is LOCALHOST else _ipv4(host)
        if (
            plan is None
            or born_host is None
            or request.properties
            or request.raw_properties is not None
            or request.keys
            or type(body) is not bytes
            or len(body) > self._max_body_bytes
            or type(queue_id) is not int
            or not 0 <= queue_id <= _I32_MAX
            or (born is not None and (type(born) is not int or not _I64_MIN <= born <= _I64_MAX))
            # ``is`` the interned int 0: anything else (another int, a bool, a float, None)
            # goes to the general path, which stores or rejects it.
            or request.flag is not _ZERO
            or request.sys_flag is not _ZERO
            or request.reconsume_times is not _ZERO
            or request.prepared_transaction_offset is not _ZERO
        ):
            return None
        body_size = len(body)
        return (
            topic,
            queue_id,
            body,
            born,
            born_host,
            plan,
            plan.packers.get(body_size) or plan.packer(body_size),
            _crc32(body) & 0x7FFFFFFF,
            plan.fixed_size + body_size,
        )

    def _plan(self, topic: object, tags: object) -> RecordPlan | None:
        """The fast path's plan for (``topic``, ``tags``); ``None`` (remembered too) sends
        such messages down the general path."""
        plan = None
        if self._fast_path and type(topic) is str and not check_topic(topic):
            plan = record_plan(topic, tags or None, self._uniq_keys.key_size)
        try:
            key = (topic, tags) if tags else topic
            hash(key)
        except TypeError:
            return None
        if len(self._plans) >= _PLANS_MAX:
            self._plans.clear()
        self._plans[key] = plan
        return plan

    def _put_general(self, request: PutRequest) -> PutResult:
        """``put`` of any request: validate and encode outside the lock (``put.prepare``),
        then place and patch the record under it."""
        if self._closed:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, detail="store is closed")
        if request.raw_properties is not None:
            raw_parts = self._raw_parts(request)
            if raw_parts is not None:
                return self._put_batch_raw([raw_parts])[0][0]
        clock = self._clock
        prepared = prepare(request, self._ctx, clock.now_ms())
        if type(prepared) is PutResult:
            return prepared
        assert isinstance(prepared, PreparedMessage)
        buf = prepared.buf
        size = prepared.size
        topic = prepared.topic
        queue_id = prepared.queue_id
        uniq_key = prepared.uniq_key
        key = (topic, queue_id)
        with self._put_lock:
            if self._failure is not None or self._closed:
                return self._unavailable()
            if prepared.idempotent and uniq_key is not None:
                entry = self._window.get(topic, uniq_key)
                if entry is not None:
                    return self._duplicate(prepared, entry)  # durable once the first is
            try:
                segment = self._commitlog.segment_for_append(size)
            except OSError as err:
                return _failed(PutStatus.CREATE_MAPPED_FILE_FAILED, "creating a segment", err)
            physical_offset = segment.base_offset + segment.write_position
            consumes = prepared.consumes_queue_offset
            queue_offset = self._queue_offsets.get(key, 0) if consumes else 0
            now = clock.now_ms()
            _pack_offsets(buf, _QUEUE_OFFSET_POSITION, queue_offset, physical_offset)
            _pack_i64(buf, prepared.timestamp_position, now)
            try:
                segment.append(buf)
            except OSError as err:
                self._undo_failed_write(segment, size, err)
                return _failed(PutStatus.UNKNOWN_ERROR, "writing the record", err)
            if consumes:
                self._queue_offsets[key] = queue_offset + 1
            if uniq_key is not None:
                self._window.add(
                    topic, uniq_key, (physical_offset, size, queue_offset, queue_id, now)
                )
            self._last_record_offset = physical_offset
            self._last_store_ts = now
        result = PutResult(
            PutStatus.PUT_OK,
            physical_offset,
            queue_offset,
            self._msg_id_prefix + format(physical_offset, "016X"),
            topic,
            queue_id,
            now,
            uniq_key,
            size,
        )
        return result

    def put_batch(self, requests: Sequence[PutRequest]) -> list[PutResult]:
        """Store many messages with one lock acquisition and one write.

        All or nothing for validity: if any message is illegal, none is stored (each result
        says why). The batch goes into one segment (BLANK and a new segment first if it does
        not fit); each (topic, queue id) gets consecutive queue offsets. Idempotent messages
        already in the window, or repeated inside the batch, are written once. Under SYNC,
        returns once one fsync covered the whole batch.
        """
        results, end = self._append_batch(requests)
        if self._sync and end:
            self._apply_status(results, self._wait_durable(end))
        return results

    def _append_batch(self, requests: Sequence[PutRequest]) -> tuple[list[PutResult], int]:
        """``put_batch`` without the wait for durability: the results and the end offset an
        fsync must cover before they are acknowledged (0 when nothing is to be waited for:
        the batch was refused)."""
        count = len(requests)
        if not count:
            return [], 0
        if self._closed:
            closed = PutResult(PutStatus.SERVICE_NOT_AVAILABLE, detail="store is closed")
            return [closed] * count, 0
        if getattr(requests[0], "raw_properties", None) is None:
            fast_parts = self._fast_parts
            parts = [fast_parts(request) for request in requests]
            if None not in parts:
                return self._put_batch_fast(parts)  # type: ignore[arg-type]
        else:  # a template request in the batch would be declined by both fast paths
            raw_parts = self._raw_parts
            raws = [raw_parts(request) for request in requests]
            if None not in raws:
                return self._put_batch_raw(raws)  # type: ignore[arg-type]
        now = self._clock.now_ms()
        ctx = self._ctx
        prepared = [prepare(request, ctx, now) for request in requests]
        rejected = reject_batch(prepared)
        if rejected is not None:
            return rejected, 0
        messages: list[PreparedMessage] = prepared  # type: ignore[assignment]
        total = sum(message.size for message in messages)
        if total + 8 > self.config.segment_size_bytes:
            detail = f"batch of {total} bytes does not fit a segment"
            return [PutResult(PutStatus.MESSAGE_ILLEGAL, detail=detail)] * count, 0
        with self._put_lock:
            if self._failure is not None or self._closed:
                return [self._unavailable()] * count, 0
            copies = duplicates_in(messages, self._window)
            writes = [m for m in messages if id(m) not in copies] if copies else messages
            placed: dict[int, tuple[int, int]] = {}
            if writes:
                failed = self._write_batch(writes, total, bool(copies), now, placed)
                if failed is not None:
                    return [failed] * count, 0
        prefix = self._msg_id_prefix
        results = []
        end = 0
        for message in messages:
            copy_of = copies.get(id(message)) if copies else None
            if isinstance(copy_of, WindowEntry):
                results.append(self._duplicate(message, copy_of))
                end = max(end, copy_of.physical_offset + copy_of.total_size)
                continue
            physical_offset, queue_offset = placed[id(copy_of or message)]
            end = max(end, physical_offset + message.size)
            results.append(
                PutResult(
                    PutStatus.PUT_OK,
                    physical_offset,
                    queue_offset,
                    prefix + format(physical_offset, "016X"),
                    message.topic,
                    message.queue_id,
                    now,
                    message.uniq_key,
                    message.size,
                    duplicate=copy_of is not None,
                )
            )
        return results, end

    def _put_batch_fast(self, parts: list[_FastParts]) -> tuple[list[PutResult], int]:
        """``_append_batch`` of requests that all take the fast path: each record is packed
        straight into the segment's memory map (or one buffer), under one lock."""
        count = len(parts)
        total = sum(part[8] for part in parts)
        if total + 8 > self.config.segment_size_bytes:
            detail = f"batch of {total} bytes does not fit a segment"
            return [PutResult(PutStatus.MESSAGE_ILLEGAL, detail=detail)] * count, 0
        placed: list[tuple[int, int, str]] = []  # (physical offset, queue offset, UNIQ_KEY)
        lock = self._put_lock
        if not lock.mutex.acquire(False):
            lock.acquire_contended()
        try:
            if self._failure is not None or self._closed:
                return [self._unavailable()] * count, 0
            where = self._batch_target(total, count)
            if isinstance(where, list):
                return where, 0
            segment, position, target, offset, buffer = where
            physical_offset = segment.base_offset + position
            now = self._now_ms()
            queue_offsets = self._queue_offsets
            pending: dict[tuple[str, int], int] = {}
            key_at = self._uniq_keys.key_at
            store_ip = self._store_ip
            store_port = self._store_port
            for topic, queue_id, body, born, born_host, plan, packer, crc, size in parts:
                key = (topic, queue_id)
                queue_offset = pending.get(key)
                if queue_offset is None:
                    queue_offset = queue_offsets.get(key, 0)
                pending[key] = queue_offset + 1
                uniq_key = key_at(now)
                packer.pack_into(
                    target, offset, size, MESSAGE_MAGIC_CODE_V1, crc, queue_id, 0, queue_offset,
                    physical_offset, 0, now if born is None else born, born_host[0],
                    born_host[1], now, store_ip, store_port, 0, 0, len(body), body, plan.before,
                    uniq_key.encode("ascii"), plan.after,
                )  # fmt: skip
                placed.append((physical_offset, queue_offset, uniq_key))
                offset += size
                physical_offset += size
            failed = self._finish_batch_write(segment, position, total, buffer, count)
            if failed is not None:
                return failed, 0
            queue_offsets.update(pending)
            if self._window_capacity:
                add = self._window.add
                for part, (offset, queue_offset, uniq_key) in zip(parts, placed, strict=True):
                    add(part[0], uniq_key, (offset, part[8], queue_offset, part[1], now))
            self._last_record_offset = placed[-1][0]
            self._last_store_ts = now
        finally:
            lock.mutex.release()
            if lock.parked:
                lock.wake_one()
        prefix = self._msg_id_prefix
        results = [
            PutResult(
                _PUT_OK,
                offset,
                queue_offset,
                f"{prefix}{offset:016X}",
                part[0],
                part[1],
                now,
                uniq_key,
                part[8],
            )  # fmt: skip
            for part, (offset, queue_offset, uniq_key) in zip(parts, placed, strict=True)
        ]
        return results, physical_offset

    def _write_batch(
        self,
        writes: list[PreparedMessage],
        total: int,
        filtered: bool,
        now: int,
        placed: dict[int, tuple[int, int]],
    ) -> PutResult | None:
        """Place and write ``writes`` (put lock held); fills ``placed``; a result on failure."""
        size = sum(message.size for message in writes) if filtered else total
        buf = writes[0].buf if len(writes) == 1 else bytearray().join(m.buf for m in writes)
        try:
            segment = self._commitlog.segment_for_append(size)
        except OSError as err:
            return _failed(PutStatus.CREATE_MAPPED_FILE_FAILED, "creating a segment", err)
        base = segment.base_offset + segment.write_position
        pending: dict[tuple[str, int], int] = {}
        offsets = self._queue_offsets
        pack_offsets = _OFFSETS.pack_into
        pack_i64 = _I64.pack_into
        position = 0
        for message in writes:
            if message.consumes_queue_offset:
                key = (message.topic, message.queue_id)
                queue_offset = pending.get(key)
                if queue_offset is None:
                    queue_offset = offsets.get(key, 0)
                pending[key] = queue_offset + 1
            else:
                queue_offset = 0
            pack_offsets(buf, position + _QUEUE_OFFSET_POSITION, queue_offset, base + position)
            pack_i64(buf, position + message.timestamp_position, now)
            placed[id(message)] = (base + position, queue_offset)
            position += message.size
        try:
            segment.append(buf)
        except OSError as err:
            placed.clear()
            self._undo_failed_write(segment, size, err)
            return _failed(PutStatus.UNKNOWN_ERROR, "writing the batch", err)
        offsets.update(pending)
        window = self._window
        for message in writes:
            if message.uniq_key is not None:
                physical_offset, queue_offset = placed[id(message)]
                window.add(
                    message.topic,
                    message.uniq_key,
                    (physical_offset, message.size, queue_offset, message.queue_id, now),
                )
        self._last_record_offset = base + position - writes[-1].size
        self._last_store_ts = now
        return None

    def _duplicate(self, message: PreparedMessage, entry: WindowEntry) -> PutResult:
        return PutResult(
            PutStatus.PUT_OK,
            entry.physical_offset,
            entry.queue_offset,
            self._msg_id_prefix + format(entry.physical_offset, "016X"),
            message.topic,
            entry.queue_id,
            entry.store_timestamp_ms,
            message.uniq_key,
            entry.total_size,
            duplicate=True,
        )

    def _await(self, result: PutResult) -> PutResult:
        """SYNC: wait until ``result``'s record is fsynced (called without the put lock)."""
        status = self._wait_durable(result.physical_offset + result.total_size)
        if status is not None:
            result.status, result.detail = status
        return result

    @staticmethod
    def _apply_status(results: list[PutResult], status: tuple[PutStatus, str] | None) -> None:
        if status is not None:
            for result in results:
                result.status, result.detail = status

    def _wait_durable(self, end_offset: int) -> tuple[PutStatus, str] | None:
        return self._flush_status(self._group.wait_durable(end_offset, self._timeout_ms))

    def _flush_status(self, outcome: FlushWait) -> tuple[PutStatus, str] | None:
        """``None`` for ``DURABLE``, else the status and detail of an unacknowledged put (a
        failed fsync makes the store fail closed)."""
        if outcome is FlushWait.DURABLE:
            return None
        if outcome is FlushWait.TIMEOUT:
            return PutStatus.FLUSH_DISK_TIMEOUT, f"no fsync within {self._timeout_ms} ms"
        self._fail(self._group.error or OSError("fsync failed"))
        return PutStatus.UNKNOWN_ERROR, f"fsync failed: {self._group.error}"

    def _unavailable(self) -> PutResult:
        if self._closed:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, detail="store is closed")
        return PutResult(
            PutStatus.SERVICE_NOT_AVAILABLE,
            detail=f"store failed closed after an I/O error: {self._failure}; reopen it",
        )

    def _undo_failed_write(self, segment: object, size: int, err: OSError) -> None:
        """Zero what a failed append may have left; if even that fails, fail closed."""
        _log.error("append failed at %s: %s", self._commitlog.max_offset, err)
        try:
            segment.discard_after_failed_write(size)  # type: ignore[attr-defined]
        except OSError as undo_err:
            self._fail(undo_err)

    def _fail(self, err: OSError) -> None:
        if self._failure is None:
            _log.error("store %s fails closed: %s", self._root, err)
            self._failure = err
            self._group.fail(err)


def _failed(status: PutStatus, what: str, err: OSError) -> PutResult:
    return PutResult(status, detail=f"{what} failed: {err}")
