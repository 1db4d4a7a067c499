"""The raw-properties fast path of ``put``/``put_batch``: copies put back verbatim.

Owns ``RawPutPaths``, a base class of ``PutPaths`` (``store_put.py``): ``_raw_parts`` (what a
request carrying ``raw_properties`` needs to be written, checked outside the put lock) and
``_put_batch_raw`` (placing and packing such records straight into the segment's memory map
under the lock). This is how the delay redelivery job (``rmq_spark/delay/``), the
transaction commit and the broker's redelivery requests put a copied message: its stored
properties string kept verbatim.

Same bytes and the same rules as the general path (``put.prepare`` + ``_write_batch``; tests
check both against ``codec.encode_record`` and against each other): topic rules, body and
properties size limits, field ranges, no UNIQ_KEY assignment and no delay rewrite (spec 9.3),
queue offsets only for non-transactional and COMMIT messages, every UNIQ_KEY remembered in
the idempotency window. A request this path does not take goes the general way: a bytes-like
body that is not ``bytes``, an IPv6 host, a v2 topic, a value of the wrong type or out of
range, properties that are not UTF-8 encodable or too large (the general path says why), and
``idempotent`` requests (the general path dedupes them).

Does not own validation rules (``put.py``), the template fast path or durability waits
(``store_put.py``).
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Callable

from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.layout import (
    MAX_PROPERTIES_SIZE_BYTES,
    MAX_TOPIC_LENGTH_V1,
    MESSAGE_MAGIC_CODE_V1,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
)
from rmq_spark.store.message import LOCALHOST
from rmq_spark.store.put import (
    LOCALHOST_IPV4,
    MAX_RECORD_OVERHEAD_BYTES,
    IdempotencyWindow,
    PutRequest,
    PutResult,
    PutStatus,
    check_topic,
    find_uniq_key,
    ipv4_of,
)
from rmq_spark.store.put_lock import PutLock
from rmq_spark.store.put_plan import HEADER_FORMAT
from rmq_spark.store.segment import Segment

__all__ = ["RawPutPaths"]

# (topic, queue_id, body, born_timestamp_ms, born_host, flag, stored sys_flag,
#  reconsume_times, prepared_transaction_offset, topic prefix, properties bytes, body CRC,
#  size, consumes a queue offset, UNIQ_KEY, packer)
_RawParts = tuple[
    str, int, bytes, "int | None", tuple[bytes, int], int, int, int, int, bytes, bytes, int, int,
    bool, "str | None", struct.Struct,
]  # fmt: skip
_I32_MIN = -(1 << 31)
_I32_MAX = (1 << 31) - 1
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_BORN_HOST_V6_BITS = 0x30  # BORNHOST_V6 | STOREHOSTADDRESS_V6: the hosts here are IPv4
_CONSUMING = (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
_TOPICS_MAX = 4096
_PACKERS_MAX = 512
_PUT_OK = PutStatus.PUT_OK
_crc32 = zlib.crc32
_ipv4 = ipv4_of
_LOCALHOST_IPV4 = LOCALHOST_IPV4


class RawPutPaths:
    """``put``/``put_batch`` of requests with ``raw_properties`` (see the module docstring)."""

    # The store's state this path shares (set up by ``MessageStore`` and ``PutPaths``).
    config: StoreConfig
    _put_lock: PutLock
    _closed: bool
    _failure: OSError | None
    _commitlog: CommitLog
    _queue_offsets: dict[tuple[str, int], int]
    _window: IdempotencyWindow
    _window_capacity: int
    _last_record_offset: int
    _last_store_ts: int
    _msg_id_prefix: str
    _max_body_bytes: int
    _fast_path: bool
    _store_ip: bytes
    _store_port: int
    _now_ms: Callable[[], int]

    def _init_raw_put_paths(self) -> None:
        """Set up this path's caches (after ``PutPaths._init_put_paths``)."""
        # topic -> length byte + ASCII bytes, or None: the topic needs the general path.
        self._raw_topics: dict[object, bytes | None] = {}
        # (body, topic prefix, properties) lengths -> the Struct packing the whole record.
        self._raw_packers: dict[tuple[int, int, int], struct.Struct] = {}

    def _raw_topic(self, topic: object) -> bytes | None:
        """The topic length byte and bytes of a legal v1 ``topic``, else ``None`` (cached)."""
        prefix = None
        if (
            self._fast_path
            and type(topic) is str
            and not check_topic(topic)
            and topic.isascii()
            and 0 < len(topic) <= MAX_TOPIC_LENGTH_V1
        ):
            prefix = bytes((len(topic),)) + topic.encode("ascii")
        if len(self._raw_topics) >= _TOPICS_MAX:
            self._raw_topics.clear()
        self._raw_topics[topic] = prefix
        return prefix

    def _raw_parts(self, request: PutRequest) -> _RawParts | None:
        """What ``_put_batch_raw`` needs to write ``request``, or ``None`` when the general
        path must take it (not a raw-properties request, or one it would refuse or that needs
        the codec's general encoder)."""
        raw = request.raw_properties
        topic = request.topic
        try:
            prefix = self._raw_topics[topic]
        except KeyError:
            prefix = self._raw_topic(topic)
        except TypeError:  # an unhashable topic: the general path refuses it
            return None
        body = request.body
        queue_id = request.queue_id
        born = request.born_timestamp_ms
        host = request.born_host
        born_host = _LOCALHOST_IPV4 if host is LOCALHOST else _ipv4(host)
        flag = request.flag
        sys_flag = request.sys_flag
        reconsume = request.reconsume_times
        prepared_offset = request.prepared_transaction_offset
        if (
            prefix is None
            or type(raw) is not str
            or request.idempotent
            or request.properties
            or request.tags
            or request.keys
            or born_host is None
            or type(body) is not bytes
            or len(body) > self._max_body_bytes
            or type(queue_id) is not int
            or not 0 <= queue_id <= _I32_MAX
            or (born is not None and (type(born) is not int or not _I64_MIN <= born <= _I64_MAX))
            or type(flag) is not int
            or not _I32_MIN <= flag <= _I32_MAX
            or type(sys_flag) is not int
            or not _I32_MIN <= sys_flag <= _I32_MAX
            or type(reconsume) is not int
            or not _I32_MIN <= reconsume <= _I32_MAX
            or type(prepared_offset) is not int
            or not _I64_MIN <= prepared_offset <= _I64_MAX
        ):
            return None
        try:
            props_data = raw.encode("utf-8")
        except UnicodeEncodeError:
            return None
        body_size = len(body)
        props_size = len(props_data)
        size = 90 + body_size + len(prefix) + props_size  # header 88, properties length 2
        if (
            props_size > MAX_PROPERTIES_SIZE_BYTES
            or size > self._max_body_bytes + MAX_RECORD_OVERHEAD_BYTES
        ):
            return None
        shape = (body_size, len(prefix), props_size)
        packer = self._raw_packers.get(shape)
        if packer is None:
            packer = struct.Struct(f"{HEADER_FORMAT}{body_size}s{len(prefix)}sh{props_size}s")
            if len(self._raw_packers) >= _PACKERS_MAX:
                self._raw_packers.clear()
            self._raw_packers[shape] = packer
        return (
            topic,
            queue_id,
            body,
            born,
            born_host,
            flag,
            sys_flag & ~_BORN_HOST_V6_BITS,
            reconsume,
            prepared_offset,
            prefix,
            props_data,
            _crc32(body) & 0x7FFFFFFF,
            size,
            (sys_flag & TRANSACTION_MASK) in _CONSUMING,
            find_uniq_key(raw),
            packer,
        )

    def _batch_target(
        self, total: int, count: int
    ) -> tuple[Segment, int, mmap.mmap | bytearray, int, bytearray | None] | list[PutResult]:
        """Put lock held: the segment a batch of ``total`` bytes goes to, its write position,
        and where to pack the records: straight into the segment's mapping, or into a buffer
        (returned last, else ``None``) appended by ``_finish_batch_write``. Failed results if
        no segment could be created."""
        segment = self._commitlog.active
        if segment is None or total + 8 > segment.limit - segment.write_position:
            try:
                segment = self._commitlog.segment_for_append(total)
            except OSError as err:
                failed = _failed(PutStatus.CREATE_MAPPED_FILE_FAILED, "creating a segment", err)
                return [failed] * count
        position = segment.write_position
        mapping = segment.mapping
        if mapping is not None and position + total <= segment.size_bytes:
            return segment, position, mapping, position, None
        buffer = bytearray(total)
        return segment, position, buffer, 0, buffer

    def _finish_batch_write(
        self, segment: Segment, position: int, total: int, buffer: bytearray | None, count: int
    ) -> list[PutResult] | None:
        """Put lock held: make the packed batch part of the segment; failed results if writing
        the buffer failed (the segment is then restored by ``_undo_failed_write``)."""
        if buffer is None:
            segment.write_position = position + total
            return None
        try:
            segment.append(buffer)
        except OSError as err:
            self._undo_failed_write(segment, total, err)  # type: ignore[attr-defined]
            return [_failed(PutStatus.UNKNOWN_ERROR, "writing the batch", err)] * count
        return None

    def _put_batch_raw(self, parts: list[_RawParts]) -> tuple[list[PutResult], int]:
        """``_append_batch`` of requests that all take this path: each record is packed
        straight into the segment's memory map (or one buffer), under one lock acquisition.
        Returns the results and the end offset an fsync must cover (0: nothing written)."""
        count = len(parts)
        total = sum(part[12] for part in parts)
        if total + 8 > self.config.segment_size_bytes:
            detail = f"batch of {total} bytes does not fit a segment"
            return [PutResult(PutStatus.MESSAGE_ILLEGAL, detail=detail)] * count, 0
        placed: list[tuple[int, int]] = []  # (physical offset, queue offset)
        lock = self._put_lock
        if not lock.mutex.acquire(False):
            lock.acquire_contended()
        try:
            if self._failure is not None or self._closed:
                return [self._unavailable()] * count, 0  # type: ignore[attr-defined]
            where = self._batch_target(total, count)
            if isinstance(where, list):
                return where, 0
            segment, position, target, offset, buffer = where
            physical_offset = segment.base_offset + position
            now = self._now_ms()
            queue_offsets = self._queue_offsets
            pending: dict[tuple[str, int], int] = {}
            store_ip = self._store_ip
            store_port = self._store_port
            for (
                topic, queue_id, body, born, born_host, flag, sys_flag, reconsume, prepared_offset,
                prefix, props_data, crc, size, consumes, _uniq_key, packer,
            ) in parts:  # fmt: skip
                if consumes:
                    key = (topic, queue_id)
                    queue_offset = pending.get(key)
                    if queue_offset is None:
                        queue_offset = queue_offsets.get(key, 0)
                    pending[key] = queue_offset + 1
                else:
                    queue_offset = 0
                packer.pack_into(
                    target, offset, size, MESSAGE_MAGIC_CODE_V1, crc, queue_id, flag,
                    queue_offset, physical_offset, sys_flag, now if born is None else born,
                    born_host[0], born_host[1], now, store_ip, store_port, reconsume,
                    prepared_offset, len(body), body, prefix, len(props_data), props_data,
                )  # fmt: skip
                placed.append((physical_offset, queue_offset))
                offset += size
                physical_offset += size
            failed = self._finish_batch_write(segment, position, total, buffer, count)
            if failed is not None:
                return failed, 0
            queue_offsets.update(pending)
            if self._window_capacity:
                add = self._window.add
                for part, (offset, queue_offset) in zip(parts, placed, strict=True):
                    if part[14] is not None:
                        add(part[0], part[14], (offset, part[12], queue_offset, part[1], now))
            self._last_record_offset = placed[-1][0]
            self._last_store_ts = now
        finally:
            lock.mutex.release()
            if lock.parked:
                lock.wake_one()
        prefix_id = self._msg_id_prefix
        results = [
            PutResult(
                _PUT_OK,
                offset,
                queue_offset,
                f"{prefix_id}{offset:016X}",
                part[0],
                part[1],
                now,
                part[14],
                part[12],
            )  # fmt: skip
            for part, (offset, queue_offset) in zip(parts, placed, strict=True)
        ]
        return results, physical_offset


def _failed(status: PutStatus, what: str, err: OSError) -> PutResult:
    return PutResult(status, detail=f"{what} failed: {err}")
