"""The ``checkpoint`` file (FORMAT.md 7) and the queue-offset snapshot file.

``checkpoint`` is 4096 bytes of big-endian int64 fields, byte-compatible with RocketMQ's
``StoreCheckpoint``:

====== ======================= ==========================================================
offset field                   what this store writes there
====== ======================= ==========================================================
0      physicMsgTimestamp      store timestamp of the last record covered by an fsync
8      logicsMsgTimestamp      not written here (ConsumeQueue builders own it); kept as is
16     indexMsgTimestamp       end timestamp of the last full index file (``set_index_timestamp``)
24     masterFlushedOffset     physical offset up to which the CommitLog is fsynced
32     confirmPhyOffset        physical offset up to which readers may read (see below)
====== ======================= ==========================================================

``confirmPhyOffset`` is what external readers (the Spark source, ``dump``, other processes)
read up to. SYNC mode publishes the fsynced offset (every byte below it is durable). ASYNC
mode publishes the end of the last fully written record: it survives a crash of the process
(the page cache keeps it) but not of the machine; it is published by the flush thread every
``confirm_publish_interval_ms``. ``masterFlushedOffset`` is always the fsynced offset; recovery
uses it as the floor below which a bad record is corruption, never a torn tail.

Publishing writes each field with one ``pwrite`` of 8 aligned bytes into the same page, and the
offsets only grow. ``read_checkpoint`` reads the file twice and retries until two reads agree,
so a reader never acts on a value torn by a concurrent write. The file is fsynced at
snapshots and at close; a stale on-disk value after a machine crash is only ever *lower*,
because each offset is written after the data it covers.

The queue-offset snapshot (``queue_offsets.json``, this store's own file, ignored by RocketMQ)
records the next queue offset of every (topic, queue id) valid at a physical offset, so that
recovery scans only the log after it (see ``recovery.py``). It is written atomically (temp
file, fsync, rename, fsync of the directory) and carries a CRC; a bad snapshot is ignored.

Does not own when these are written (``flush.py``, ``message_store.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import struct
from dataclasses import dataclass, field
from pathlib import Path

from rmq_spark.errors import CheckpointDamagedError
from rmq_spark.store.crc import crc32
from rmq_spark.store.fileio import (
    FileKind,
    FileOpener,
    OsOpener,
    SegmentFile,
    write_file_atomically,
)
from rmq_spark.store.layout import CHECKPOINT_FILE_SIZE_BYTES

__all__ = [
    "CHECKPOINT_FILE",
    "Checkpoint",
    "CheckpointValues",
    "QueueOffsetSnapshot",
    "SNAPSHOT_FILE",
    "read_checkpoint",
    "read_snapshot",
    "remove_snapshot",
    "write_checkpoint",
    "write_snapshot",
]

CHECKPOINT_FILE = "checkpoint"
SNAPSHOT_FILE = "queue_offsets.json"
_SNAPSHOT_VERSION = 1
_FIELDS = struct.Struct(">qqqqq")
_I64 = struct.Struct(">q")


def _astuple(values: CheckpointValues) -> tuple[int, int, int, int, int]:
    return (
        values.physic_msg_timestamp_ms,
        values.logics_msg_timestamp_ms,
        values.index_msg_timestamp_ms,
        values.master_flushed_offset,
        values.confirm_phy_offset,
    )


_PHYSIC_TS_POSITION = 0
_INDEX_TS_POSITION = 16
_FLUSHED_POSITION = 24
_CONFIRM_POSITION = 32
_STABLE_READ_ATTEMPTS = 100

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CheckpointValues:
    """The five fields of the checkpoint file."""

    physic_msg_timestamp_ms: int = 0
    logics_msg_timestamp_ms: int = 0
    index_msg_timestamp_ms: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0

    @classmethod
    def unpack(cls, data: bytes) -> CheckpointValues:
        return cls(*_FIELDS.unpack_from(data.ljust(_FIELDS.size, b"\0")))


class Checkpoint:
    """The open ``checkpoint`` file of a running store (the writer side)."""

    def __init__(self, file: SegmentFile, values: CheckpointValues) -> None:
        self._file = file
        self.values = values

    @classmethod
    def open(cls, root_dir: Path, opener: FileOpener) -> Checkpoint:
        """Open ``<root>/checkpoint``, creating a zero-filled 4096-byte one if missing."""
        path = root_dir / CHECKPOINT_FILE
        if path.exists():
            _check_regular(path)
            file = opener.open(path, FileKind.CHECKPOINT)
            if file.size() < CHECKPOINT_FILE_SIZE_BYTES:
                file.write(file.size(), bytes(CHECKPOINT_FILE_SIZE_BYTES - file.size()))
        else:
            file = opener.create(path, CHECKPOINT_FILE_SIZE_BYTES, FileKind.CHECKPOINT)
        return cls(file, CheckpointValues.unpack(file.read(0, _FIELDS.size)))

    def publish_confirmed(self, confirm_phy_offset: int) -> None:
        """Move ``confirmPhyOffset`` (one 8-byte aligned pwrite)."""
        self._file.write(_CONFIRM_POSITION, _I64.pack(confirm_phy_offset))
        self.values = _replace(self.values, confirm_phy_offset=confirm_phy_offset)

    def publish_flushed(self, flushed_offset: int, physic_msg_timestamp_ms: int) -> None:
        """Move ``masterFlushedOffset`` and ``physicMsgTimestamp`` after an fsync."""
        self._file.write(_FLUSHED_POSITION, _I64.pack(flushed_offset))
        if physic_msg_timestamp_ms:
            self._file.write(_PHYSIC_TS_POSITION, _I64.pack(physic_msg_timestamp_ms))
        self.values = _replace(
            self.values,
            master_flushed_offset=flushed_offset,
            physic_msg_timestamp_ms=physic_msg_timestamp_ms or self.values.physic_msg_timestamp_ms,
        )

    def publish_durable(self, offset: int, physic_msg_timestamp_ms: int) -> None:
        """``publish_flushed`` and ``publish_confirmed`` of one offset (SYNC: what is durable
        is readable), with one write of the five fields (this object owns them all; readers
        read until two reads agree, ``read_checkpoint``)."""
        values = self.values
        values = CheckpointValues(
            physic_msg_timestamp_ms or values.physic_msg_timestamp_ms,
            values.logics_msg_timestamp_ms,
            values.index_msg_timestamp_ms,
            offset,
            offset,
        )
        self._file.write(0, _FIELDS.pack(*_astuple(values)))
        self.values = values

    def set_index_timestamp(self, index_msg_timestamp_ms: int) -> None:
        """Record a full, flushed index file's end timestamp (``indexMsgTimestamp``, one
        8-byte pwrite, then fsync), as ``IndexService.flush`` does on rolling."""
        self._file.write(_INDEX_TS_POSITION, _I64.pack(index_msg_timestamp_ms))
        self.values = _replace(self.values, index_msg_timestamp_ms=index_msg_timestamp_ms)
        self._file.fsync()

    def reset(self, confirm_phy_offset: int, flushed_offset: int) -> None:
        """Lower both offsets after recovery truncated the log below them (then fsync)."""
        self._file.write(
            _FLUSHED_POSITION, _I64.pack(flushed_offset) + _I64.pack(confirm_phy_offset)
        )
        self.values = _replace(
            self.values, master_flushed_offset=flushed_offset, confirm_phy_offset=confirm_phy_offset
        )
        self._file.fsync()

    def fsync(self) -> None:
        self._file.fsync()

    def close(self) -> None:
        self._file.close()


def _check_regular(path: Path) -> None:
    if not path.is_file():
        raise CheckpointDamagedError(
            str(path),
            "cannot read: not a regular file; the store does not open. Run `rmq-spark recover "
            f"--store {path.parent} --reset-checkpoint` (it is moved to quarantine/)",
        )


def _replace(values: CheckpointValues, **changes: int) -> CheckpointValues:
    fields = {
        "physic_msg_timestamp_ms": values.physic_msg_timestamp_ms,
        "logics_msg_timestamp_ms": values.logics_msg_timestamp_ms,
        "index_msg_timestamp_ms": values.index_msg_timestamp_ms,
        "master_flushed_offset": values.master_flushed_offset,
        "confirm_phy_offset": values.confirm_phy_offset,
    }
    fields.update(changes)
    return CheckpointValues(**fields)


def read_checkpoint(root_dir: Path) -> CheckpointValues | None:
    """Read the checkpoint of a store that may be running in another process.

    Reads twice until two reads agree, so a concurrent 8-byte write is never seen torn.

    Returns
    -------
    CheckpointValues or None
        ``None`` if the store has no checkpoint file yet.

    Raises
    ------
    CheckpointDamagedError
        The checkpoint exists but cannot be read (a directory, no permission).
    """
    path = root_dir / CHECKPOINT_FILE
    try:
        file = OsOpener().open(path, FileKind.CHECKPOINT, read_only=True)
    except FileNotFoundError:
        return None
    except OSError as err:  # no permission: the store's tools say so in one line
        raise CheckpointDamagedError(str(path), f"cannot read: {err.strerror or err}") from None
    try:
        return CheckpointValues.unpack(_stable_read(file))
    except OSError as err:  # a directory opens, but does not read
        raise CheckpointDamagedError(str(path), f"cannot read: {err.strerror or err}") from None
    finally:
        file.close()


def _stable_read(file: SegmentFile) -> bytes:
    previous = file.read(0, _FIELDS.size)
    for _ in range(_STABLE_READ_ATTEMPTS):
        current = file.read(0, _FIELDS.size)
        if current == previous:
            break
        previous = current
    return previous


def write_checkpoint(root_dir: Path, values: CheckpointValues) -> None:
    """Create ``<root>/checkpoint`` holding ``values`` (atomically, durably; raises
    ``OSError``): how ``rmq-spark recover --reset-checkpoint`` replaces a damaged one."""
    data = _FIELDS.pack(*_astuple(values)).ljust(CHECKPOINT_FILE_SIZE_BYTES, b"\0")
    write_file_atomically(root_dir / CHECKPOINT_FILE, data)


# --- queue-offset snapshot -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueOffsetSnapshot:
    """Queue offsets valid at ``physical_offset`` (everything below it was fsynced).

    Attributes
    ----------
    physical_offset
        End of the log the table is valid at (a record boundary, or a segment start).
    last_record_offset
        Start of the last record below ``physical_offset`` (-1 if none): recovery decodes it
        to check that the snapshot matches the log.
    window_start_offset
        Physical offset of the oldest record in the idempotency window (recovery rescans
        ``[window_start_offset, physical_offset)`` to rebuild the window).
    queue_offsets
        ``{(topic, queue_id): next queue offset}``.
    """

    physical_offset: int
    last_record_offset: int = -1
    window_start_offset: int = 0
    queue_offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    def to_json(self) -> str:
        queues = sorted(
            [topic, queue_id, offset] for (topic, queue_id), offset in self.queue_offsets.items()
        )
        body = {
            "version": _SNAPSHOT_VERSION,
            "physical_offset": self.physical_offset,
            "last_record_offset": self.last_record_offset,
            "window_start_offset": self.window_start_offset,
            "queues": queues,
        }
        payload = json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        return json.dumps({"crc": crc32(payload.encode()), "snapshot": body}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> QueueOffsetSnapshot:
        """Parse a snapshot; ``ValueError`` if it is malformed or its CRC does not match."""
        outer = json.loads(text)
        body = outer["snapshot"]
        payload = json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        if crc32(payload.encode()) != outer["crc"]:
            raise ValueError("CRC mismatch")
        if body["version"] != _SNAPSHOT_VERSION:
            raise ValueError(f"unknown version {body['version']}")
        return cls(
            physical_offset=int(body["physical_offset"]),
            last_record_offset=int(body["last_record_offset"]),
            window_start_offset=int(body["window_start_offset"]),
            queue_offsets={(str(t), int(q)): int(o) for t, q, o in body["queues"]},
        )


def write_snapshot(root_dir: Path, snapshot: QueueOffsetSnapshot) -> None:
    """Replace ``<root>/queue_offsets.json`` atomically and durably (raises ``OSError``)."""
    write_file_atomically(root_dir / SNAPSHOT_FILE, snapshot.to_json().encode())


def read_snapshot(root_dir: Path) -> QueueOffsetSnapshot | None:
    """The last snapshot, or ``None`` if there is none or it is unreadable (logged)."""
    path = root_dir / SNAPSHOT_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return QueueOffsetSnapshot.from_json(text)
    except (ValueError, KeyError, TypeError) as err:
        _log.warning("ignoring unreadable queue-offset snapshot %s: %s", path, err)
        return None


def remove_snapshot(root_dir: Path) -> None:
    """Delete the snapshot (after a truncation made it refer to data that is gone)."""
    with contextlib.suppress(FileNotFoundError):
        (root_dir / SNAPSHOT_FILE).unlink()
