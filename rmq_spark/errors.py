"""The single exception tree of rmq_spark.

Every error raised on purpose by this package is an ``RmqError``. Errors are grouped by when
they happen::

    RmqError
    ├── ConfigError                bad or missing config key; names the key path
    ├── EnvironmentCheckError      Java / jars / venv missing: what to install and how
    ├── InteropError               the Java interop harness failed to build or run
    ├── StoreError                 the CommitLog store
    │   ├── CorruptRecordError     bad bytes on disk: path, position, reason (and CRCs)
    │   │   ├── RecoveryRefusedError  more than one torn write to cut: `rmq-spark recover`
    │   │   ├── DataMissingError      acknowledged (durable) data is missing: file, position
    │   │   └── ConsumeQueueCorruptError  a ConsumeQueue file that contradicts the CommitLog
    │   ├── CheckpointDamagedError the checkpoint holds offsets no log can have
    │   ├── InvalidMessageError    a message that cannot be encoded (before any write)
    │   │   └── InvalidMessageIdError  not an offset message id (32 or 56 hex characters)
    │   ├── SegmentLayoutError     commitlog/ cannot be loaded: a file of the wrong size, a gap
    │   │   └── SegmentSizeMismatchError  a segment whose length is not segment_size_bytes
    │   ├── OffsetOutOfRangeError  requested offset outside [min, max)
    │   ├── StoreClosedError       the store was closed
    │   ├── StoreLockedError       another process holds the store's lock file
    │   │   └── ScheduleLockedError  another redelivery job holds config/schedule.lock
    │   ├── StoreIOError           the OS refused a write/fsync/truncate (ENOSPC, EIO, ...)
    │   ├── StoreMetadataError     a damaged store JSON file (config/*.json, reader progress, ...)
    │   ├── ProgressFormatError    a damaged schedule journal (scheduleJournal.json)
    │   └── EntryMismatchError     a schedule entry that does not match its record
    ├── ProtocolError              a peer broke the wire protocol
    │   ├── LocalProtocolError     we were asked to send something invalid
    │   └── RemoteProtocolError    the peer sent something invalid
    │       └── RemotingFrameError  a RocketMQ remoting frame that breaks its layout
    ├── SourceError                bad Spark option, or an offset we did not issue
    │   ├── DataLossError          data the query needed was deleted (failOnDataLoss=true)
    │   ├── EntrySourceError       reading the consume_queue table for due entries failed
    │   └── GroupOffsetError       a consumerGroup commit or read of group offsets failed
    ├── TableError                 a reput table cannot be created, registered or written
    │   ├── SchemaMismatchError    rows whose columns or types differ from the table's
    │   └── StoreLayoutMismatchError  one-store tables opened over several stores, or back
    ├── ReputError                 the reput stream failed (Spark's reason)
    ├── MessageNotFoundError       no message where a lookup pointed (deleted, never written)
    ├── FilterExpressionError      a consumer's TAG / SQL92 filter that does not compile: column
    ├── SinkError                  the rocketmq sink: bad option or column, store busy, broker down
    │   └── SinkRowError           a row the sink or the broker refused: partition, row, UNIQ_KEY
    └── BrokerError                broker lifecycle: port taken, broker down, shutting down
        ├── SendRejectedError      the broker refused a message (RocketMQ status code)
        ├── RedeliveryFailedError  a --once delay run could not finish
        └── ConsumeRejectedError   the broker refused a receive/ack (RocketMQ status code)

Expected outcomes of a put (message too large, flush timeout, ...) are *values*
(``PutStatus``), not exceptions. Foreign errors (OSError, Py4J, Delta) are caught at the
boundary and re-raised as one of these with ``raise ... from err``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "BrokerError",
    "CheckpointDamagedError",
    "ConfigError",
    "ConsumeQueueCorruptError",
    "ConsumeRejectedError",
    "CorruptRecordError",
    "DataLossError",
    "DataMissingError",
    "EntryMismatchError",
    "EntrySourceError",
    "EnvironmentCheckError",
    "FilterExpressionError",
    "GroupOffsetError",
    "InteropError",
    "InvalidMessageError",
    "InvalidMessageIdError",
    "LocalProtocolError",
    "MessageNotFoundError",
    "OffsetOutOfRangeError",
    "ProgressFormatError",
    "ProtocolError",
    "RecoveryRefusedError",
    "RedeliveryFailedError",
    "RemoteProtocolError",
    "RemotingFrameError",
    "ReputError",
    "RmqError",
    "ScheduleLockedError",
    "SchemaMismatchError",
    "SegmentLayoutError",
    "SegmentSizeMismatchError",
    "SendRejectedError",
    "SinkError",
    "SinkRowError",
    "SourceError",
    "StoreClosedError",
    "StoreError",
    "StoreIOError",
    "StoreLayoutMismatchError",
    "StoreLockedError",
    "StoreMetadataError",
    "TableError",
]


class RmqError(Exception):
    """Base of every error rmq_spark raises on purpose."""


class ConfigError(RmqError):
    """A config key is unknown, missing or out of range. ``key_path`` names it."""

    def __init__(self, key_path: str, reason: str) -> None:
        super().__init__(f"{key_path}: {reason}")
        self.key_path = key_path
        self.reason = reason


class EnvironmentCheckError(RmqError):
    """The machine lacks something the project needs (Java, the Delta jars, ...)."""


class StoreError(RmqError):
    """Something went wrong in the CommitLog store."""


class CorruptRecordError(StoreError):
    """Bytes on disk that are not a valid record where one must be.

    ``path`` is the segment file (or a label such as ``<buffer>``), ``position`` the byte
    position inside it, ``reason`` a short sentence; CRC mismatches also carry
    ``stored_crc`` and ``computed_crc``.
    """

    def __init__(
        self,
        path: str,
        position: int,
        reason: str,
        *,
        stored_crc: int | None = None,
        computed_crc: int | None = None,
    ) -> None:
        detail = reason
        if stored_crc is not None and computed_crc is not None:
            detail = f"{reason} (stored 0x{stored_crc:08x}, computed 0x{computed_crc:08x})"
        super().__init__(f"{path}: {detail} at position {position}")
        self.path = path
        self.position = position
        self.reason = reason
        self.stored_crc = stored_crc
        self.computed_crc = computed_crc


class RecoveryRefusedError(CorruptRecordError):
    """The end of the log is not one torn write (corruption below the durable offset, data
    past a bad record, later non-empty segments): the store does not open; an operator
    decides with ``rmq-spark recover --truncate-at``."""


class DataMissingError(CorruptRecordError):
    """Data the checkpoint (or the segment layout) says was acknowledged is not on disk: a
    truncated or deleted segment file. ``path``/``position`` say where it should be."""


class ConsumeQueueCorruptError(CorruptRecordError):
    """A ConsumeQueue file (``path``, byte ``position``) that is misnamed, of the wrong size,
    or whose units contradict the CommitLog below what was flushed; nothing is deleted."""


class CheckpointDamagedError(StoreError):
    """The ``checkpoint`` file holds offsets that no log can have (a damaged file)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: damaged checkpoint: {reason}")
        self.path = path
        self.reason = reason


class OffsetOutOfRangeError(StoreError):
    """A physical offset outside the store's valid range ``[min_offset, max_offset)``."""

    def __init__(self, offset: int, min_offset: int, max_offset: int) -> None:
        super().__init__(
            f"physical offset {offset} is outside the readable range [{min_offset}, {max_offset})"
        )
        self.offset = offset
        self.min_offset = min_offset
        self.max_offset = max_offset


class StoreClosedError(StoreError):
    """The store was used after ``close()``."""


class StoreLockedError(StoreError):
    """Another process (a second broker) holds the store's ``lock`` file."""


class StoreIOError(StoreError):
    """The operating system refused a write, fsync or truncate (disk full, I/O error)."""


class StoreMetadataError(StoreError):
    """A store JSON file beside the log (``config/readers/*.json``, ``config/retention.json``)
    is not in its format; ``path`` names it, ``reason`` says what is wrong."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class ProtocolError(RmqError):
    """A wire-protocol rule was broken."""


class LocalProtocolError(ProtocolError):
    """We were asked to send something the protocol does not allow."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol does not allow."""


class RemotingFrameError(RemoteProtocolError):
    """A remoting frame (``RemotingCommand``) that cannot be decoded: truncated, a header
    length past the frame, over the size limit, or a header that does not parse."""


class SourceError(RmqError):
    """A bad Spark option, or an offset this source did not issue."""


class DataLossError(SourceError):
    """Records a query needed were deleted before it read them (``failOnDataLoss=true``)."""

    def __init__(self, start_offset: int, end_offset: int, detail: str = "") -> None:
        message = (
            f"physical offsets [{start_offset}, {end_offset}) were deleted before they were read"
        )
        if detail:
            message = f"{message}: {detail}"
        message += "; set failOnDataLoss=false to skip the lost range and continue"
        super().__init__(message)
        self.start_offset = start_offset
        self.end_offset = end_offset


class BrokerError(RmqError):
    """Broker lifecycle errors: the port or store is taken, the broker is down or stopping."""


class InteropError(RmqError):
    """The Java harness failed to build or a subcommand exited with an error."""


class EntrySourceError(SourceError):
    """Reading the consume_queue table failed (Spark's message is kept)."""


class ScheduleLockedError(StoreLockedError):
    """Another redelivery job holds ``<store>/config/schedule.lock``."""


class ProgressFormatError(StoreError):
    """Text that is not a valid schedule journal (``scheduleJournal.json``)."""


class RedeliveryFailedError(BrokerError):
    """A ``--once`` run could not finish: a put's outcome stayed unknown (broker down,
    timeouts) or the broker refused messages. Nothing unfinished was marked done."""


class EntryMismatchError(StoreError):
    """A schedule entry points at a record that is not the one it describes (the
    consume_queue table belongs to another store, or the log was replaced)."""


class TableError(RmqError):
    """A reput table cannot be created, registered or written; names the table and path."""


class ReputError(RmqError):
    """The reput stream failed; the message carries Spark's reason."""


class SchemaMismatchError(TableError, ValueError):
    """The rows' columns or types differ from the table's (nullability aside)."""


class StoreLayoutMismatchError(TableError):
    """Tables built from one store opened by a job over several (no ``store`` column), or
    the other way round; names the tables directory and both layouts."""


class InvalidMessageError(StoreError):
    """A message that cannot be encoded: a field out of range, a topic or properties too long.

    Raised *before* anything is written; ``field`` names the offending field.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class SendRejectedError(BrokerError):
    """The broker refused a message; ``code`` is the RocketMQ status code (``code_name``)."""

    def __init__(self, code: int, code_name: str, reason: str, message_id: str) -> None:
        self.code = code
        self.code_name = code_name
        self.reason = reason
        self.message_id = message_id
        super().__init__(f"{code_name} ({code}): {reason} [message id {message_id}]")


class MessageNotFoundError(RmqError):
    """No message where a lookup pointed (an id of a deleted or never written record)."""


class SegmentLayoutError(StoreError):
    """The ``commitlog/`` directory cannot be loaded: a file of the wrong size, or a gap."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class SegmentSizeMismatchError(SegmentLayoutError):
    """A segment file whose length is not the configured ``segment_size_bytes``.

    RocketMQ's ``MappedFileQueue.load`` refuses such a file and the broker does not start
    (FORMAT.md 1); so do we, before anything in the store is changed. ``store_size`` is the
    size every segment file of the store has, when they all agree (then the store was
    written with that size and opening it with ``segment_size_bytes = store_size`` works);
    ``None`` when they differ (a damaged or foreign file).
    """

    def __init__(
        self, path: Path, size: int, configured: int, store_size: int | None = None
    ) -> None:
        if store_size is not None:
            fix = (
                f"every segment of this store is {store_size} bytes: open it with "
                f"`--set store.segment_size_bytes={store_size}` (or segment_size_bytes = "
                f"{store_size} under [store] in the config file)"
            )
        else:
            fix = (
                "the segment files differ in size, so this one is damaged or foreign: move it "
                "away, or set `--set store.segment_size_bytes=N` to the size the store was "
                "written with"
            )
        super().__init__(
            path,
            f"length {size} does not match store.segment_size_bytes {configured}; RocketMQ "
            f"refuses to load such a file and so do we. To fix: {fix}",
        )
        self.size = size
        self.configured = configured
        self.store_size = store_size


class InvalidMessageIdError(InvalidMessageError):
    """A string that is not an offset message id (32 or 56 hex characters)."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__("msg_id", f"{text!r}: {reason}")
        self.text = text


_EXPRESSION_SHOWN_MAX = 200


class FilterExpressionError(RmqError):
    """A consumer's filter expression that does not compile (the gRPC layer answers
    ``ILLEGAL_FILTER_EXPRESSION``). ``position`` is the 0-based character offset of the
    offending token, ``None`` when the whole expression is at fault."""

    def __init__(
        self, expression_type: str, expression: str, position: int | None, reason: str
    ) -> None:
        where = ""
        if position is not None:
            line = expression.count("\n", 0, position) + 1
            column = position - (expression.rfind("\n", 0, position) + 1) + 1
            where = (
                f" at line {line}, column {column}"
                if "\n" in expression
                else f" at column {column}"
            )
        shown = repr(expression)
        if len(expression) > _EXPRESSION_SHOWN_MAX:  # an answer and a log line, not a copy
            shown = f"{expression[:_EXPRESSION_SHOWN_MAX]!r}... ({len(expression)} characters)"
        super().__init__(f"{expression_type} filter {shown}{where}: {reason}")
        self.expression_type = expression_type
        self.expression = expression
        self.position = position
        self.reason = reason


class ConsumeRejectedError(BrokerError):
    """The broker refused a receive, ack or invisible-time change; ``code`` is the RocketMQ
    status code (``code_name``), e.g. 40013 INVALID_RECEIPT_HANDLE for a stale handle."""

    def __init__(self, code: int, code_name: str, reason: str) -> None:
        self.code = code
        self.code_name = code_name
        self.reason = reason
        super().__init__(f"{code_name} ({code}): {reason}")


class SinkError(RmqError):
    """The ``rocketmq`` sink cannot write: a bad option or column (at plan time), a store
    another process holds, a broker that cannot be reached."""


class SinkRowError(SinkError):
    """A row the sink or the broker refused; names the Spark partition, the row's position in
    it and its UNIQ_KEY (rows before it in the partition may be stored)."""

    def __init__(self, partition: int, row: int, uniq_key: str, reason: str) -> None:
        super().__init__(f"partition {partition}, row {row} (UNIQ_KEY {uniq_key}): {reason}")
        self.partition = partition
        self.row = row
        self.uniq_key = uniq_key
        self.reason = reason


class GroupOffsetError(SourceError):
    """A ``consumerGroup`` query could not commit or read the group's offsets (broker refused,
    or a broker holds the store and the ``brokers`` option is missing)."""
