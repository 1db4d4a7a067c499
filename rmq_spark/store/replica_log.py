"""``ReplicaLog``: a slave's way into the store: the master's CommitLog bytes, appended as
they are, at the offsets they had on the master (docs/REPLICATION.md).

Owns the raw-append rules of a replica: the stream must continue exactly where the slave's
log ends (or re-send bytes the slave already has, which must then be identical: that is how
a diverged slave is found), every record is decoded and CRC-checked before it is written
(``record_decode``, the same rules as recovery), a record never straddles two chunks' write
(a partial record waits for the rest), a BLANK ends the segment as the master's did (its
untouched tail is skipped, not written). Each written record's facts go to the
ConsumeQueue/IndexFile dispatch as a put's do (``cq_facts``), and the queue-offset table
advances as recovery's does, so the derived state is rebuilt from the log.

Does not own: the network (``broker/replication/``), fsyncs (the store's flush policy, via
``after_write``), files (``commitlog.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from rmq_spark.errors import CorruptRecordError, StoreError
from rmq_spark.store.appender import Appender
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.layout import (
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    segment_name,
)
from rmq_spark.store.record_decode import (
    BlankPadding,
    DecodedRecord,
    NeedMoreData,
    decode_record,
)
from rmq_spark.store.record_layout import HEADER8, MIN_RECORD_SIZE_BYTES
from rmq_spark.store.replica_batch import RecordColumns, check_run

__all__ = ["ReplicaLog", "ReplicaRefusedError"]

_COUNTED = (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)  # types that take a queue offset
_MESSAGE_MAGICS = (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2)
_SPLIT_BYTES = 1 << 16


class ReplicaRefusedError(StoreError):
    """The master's stream cannot be appended: a gap, a diverged log or a corrupt record."""


class ReplicaLog:
    """Appends a master's byte stream to this store; not thread-safe (one replication client).

    ``start()`` says where to ask the master to resume: the start of the slave's last
    record, so that the first bytes received are compared with what the slave holds."""

    def __init__(
        self, appender: Appender, commitlog: CommitLog, after_write: Callable[[], None]
    ) -> None:
        self._appender = appender
        self._log = commitlog
        self._after_write = after_write
        self._size = commitlog.segment_size_bytes
        self._pending: bytes | memoryview = b""  # bytes of a record not received whole yet
        self._skip = 0  # bytes of a segment's tail after its BLANK still to come
        self._next = 0  # the stream offset the next chunk must start at
        self._verify_until = 0  # below here the stream must equal the slave's own bytes

    @property
    def next_offset(self) -> int:
        """Where the master's stream must continue."""
        return self._next

    def start(self) -> int:
        """Reset the stream state; the offset to report to the master first."""
        end = self._log.max_offset
        last = self._appender.last_record_offset
        resume = last if 0 <= last < end and last >= self._log.min_offset else end
        self._pending, self._skip = b"", 0
        self._next, self._verify_until = resume, end
        return resume

    def feed(self, offset: int, data: bytes | memoryview) -> int:
        """Append the master's ``data`` found at ``offset``; returns the bytes written.

        Raises
        ------
        ReplicaRefusedError
            ``offset`` is not where the stream continues, the bytes differ from the slave's
            own (diverged logs), or a record is invalid (file and position named).
        """
        if offset != self._next and self._next == 0 and not self._log.segments:
            raise ReplicaRefusedError(
                f"the master's log starts at offset {offset}, not 0 (its oldest segments were "
                f"deleted): seeding an empty slave from there is not supported"
            )
        if offset != self._next:
            raise ReplicaRefusedError(
                f"the master sent offset {offset} where {self._next} was expected: its log "
                f"and this slave's diverge (or the master's was cut); refusing to merge"
            )
        self._next += len(data)
        if offset < self._verify_until:
            data = self._verify(offset, data)
        if self._skip:
            cut = min(self._skip, len(data))
            self._skip -= cut
            data = data[cut:]
        if not data:
            return 0
        written = 0
        rest = self._rest_of_pending(len(data))
        if rest:  # the record split across transfers first, alone: the rest is not copied
            self._pending += data[:rest]
            written = self._append_whole()
            data = memoryview(data)[rest:]
        self._pending = self._pending + data if self._pending else data
        return written + self._append_whole()

    def _rest_of_pending(self, coming: int) -> int:
        """How many of ``coming`` bytes complete the message record begun in ``_pending``
        when they are many more than that (0: append them all behind it)."""
        pending = self._pending
        if len(pending) < 8 or coming < _SPLIT_BYTES:
            return 0
        total, magic = HEADER8.unpack_from(pending)
        if magic not in _MESSAGE_MAGICS or total < MIN_RECORD_SIZE_BYTES:
            return 0  # the decoder says what it is
        rest = total - len(pending)
        return rest if 0 < rest < coming else 0

    def _verify(self, offset: int, data: bytes) -> bytes:
        """Compare the part of ``data`` below ``_verify_until`` with the slave's bytes."""
        mine_end = min(self._verify_until, offset + len(data))
        position = offset
        while position < mine_end:
            own = self._log.read(position, mine_end - position)
            theirs = data[position - offset : position - offset + len(own)]
            if own != theirs:
                pairs = zip(own, theirs, strict=False)
                at = position + next(i for i, (a, b) in enumerate(pairs) if a != b)
                raise ReplicaRefusedError(
                    f"diverged: the master's byte at offset {at} (file "
                    f"{segment_name(at - at % self._size)}, position {at % self._size}) differs "
                    f"from this slave's; the slave's log is not a prefix of the master's"
                )
            position += len(own)
        return data[mine_end - offset :]

    def _append_whole(self) -> int:
        """Write the whole records (and a BLANK) at the front of ``_pending``: runs of records
        checked together (``replica_batch``), the decoder deciding wherever a run stops."""
        buf, base = self._pending, self._log.max_offset
        name, start = segment_name(base - base % self._size), base % self._size
        records = RecordColumns()
        used, blank = 0, None
        while used < len(buf):
            used = check_run(buf, used, base, records)
            if used >= len(buf):
                break
            try:
                outcome = decode_record(buf, used, path=name, with_body=False)
            except CorruptRecordError as err:
                raise ReplicaRefusedError(
                    f"corrupt record in the master's stream: file {name}, position "
                    f"{start + used}: {err.reason}"
                ) from None
            if isinstance(outcome, NeedMoreData):
                break
            if isinstance(outcome, BlankPadding):
                blank = outcome.remaining_bytes
                break
            if not isinstance(outcome, DecodedRecord) or outcome.record.physical_offset != (
                base + used
            ):
                raise ReplicaRefusedError(
                    f"bad record in the master's stream: file {name}, position {start + used}: "
                    f"not a record written at offset {base + used}"
                )
            _add_decoded(records, outcome)
            used = outcome.next_position
        self._write(memoryview(buf)[:used], base, records, blank is not None)
        if blank is not None:
            rest = len(buf) - used
            self._skip = max(0, blank - rest)
            used = len(buf)
        self._pending = bytes(buf[used:])
        if records or blank is not None:
            self._after_write()
        return used

    def _write(self, data: memoryview, base: int, records: RecordColumns, blank: bool) -> None:
        appender = self._appender
        with appender.lock:
            if appender.failure is not None or appender.closed:
                raise ReplicaRefusedError("the store is closed or failed; not appending")
            if data:
                segment = self._log.segment_for_append(len(data))
                if segment.write_offset != base:
                    raise ReplicaRefusedError(
                        f"record at offset {base} does not fit segment "
                        f"{segment_name(segment.base_offset)} as on the master (segment "
                        f"sizes differ?)"
                    )
                segment.append(data)
                self._account(base, records)
            if blank:
                segment = self._log.last
                if segment is None:
                    raise ReplicaRefusedError("a BLANK record before any segment")
                segment.append_blank()

    def _account(self, base: int, records: RecordColumns) -> None:
        """Lock held: queue offsets (as recovery), dispatch facts (one batch, as a put's),
        the last record."""
        appender = self._appender
        offsets = appender.queue_offsets
        topics, queue_ids, sys_flags = records.topics, records.queue_ids, records.sys_flags
        for topic, queue_id, queue_offset, sys_flag in zip(
            topics, queue_ids, records.queue_offsets, sys_flags, strict=True
        ):
            if sys_flag & TRANSACTION_MASK in _COUNTED:
                key = (topic, queue_id)
                if queue_offset >= offsets.get(key, 0):
                    offsets[key] = queue_offset + 1
        physical = [base + position for position in records.positions]
        pending = appender.cq_pending
        if pending is not None:
            pending.add(
                (physical, records.sizes, topics, queue_ids, records.queue_offsets, sys_flags,
                 None, records.properties, records.store_timestamps, None)
            )  # fmt: skip
        appender.last_record_offset = physical[-1]
        appender.last_store_ts = records.store_timestamps[-1]


def _add_decoded(records: RecordColumns, decoded: DecodedRecord) -> None:
    """One record the decoder passed, added to the run's columns."""
    record = decoded.record
    records.positions.append(decoded.position)
    records.sizes.append(decoded.total_size)
    records.topics.append(record.topic)
    records.queue_ids.append(record.queue_id)
    records.queue_offsets.append(record.queue_offset)
    records.sys_flags.append(record.sys_flag)
    records.properties.append(record.properties)
    records.store_timestamps.append(record.store_timestamp_ms)
