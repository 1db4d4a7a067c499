"""RocketMQ 5.x's ``config/timercheck``: where its timer store resumes (STORE_FORMAT 9.6).

A RocketMQ broker started on a store re-reads ``rmq_sys_wheel_timer`` queue 0 from
``lastTimerQueueOffset`` (capped by ``masterTimerQueueOffset``, so from 0 when the file is
missing) and turns its timer wheel on from ``lastReadTimeMs`` (without the file: 14 days back,
one empty slot after another). Without this file a broker taking over a store would deliver
again every timer message our schedule job already delivered. The schedule job therefore
writes it beside ``delayOffset.json``: both queue offsets are the timer queue's low-water mark
(everything below it delivered) and ``lastReadTimeMs`` the job's pass time. A timer message
above the mark that the job delivered out of order (they fall due in any order) is delivered
once more by RocketMQ: at least once, never lost, as ``docs/DELAY.md`` says.

Layout (``TimerCheckpoint.java``): one 4 KiB page of big-endian int64s: 0 ``lastReadTimeMs``,
8 ``lastTimerLogFlushPos``, 16 ``lastTimerQueueOffset``, 24 ``masterTimerQueueOffset``, then
the ``dataVersion``: 32 state version, 40 timestamp, 48 counter.

A store whose ``timerlog/`` holds data has been run by RocketMQ's own timer: its checkpoint
describes that log (``lastTimerLogFlushPos``) and is left alone.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.broker.config_files.rocketmq_config_files import config_path
from rmq_spark.errors import StoreIOError, StoreMetadataError
from rmq_spark.store.fileio import make_dirs_durably, write_file_atomically

__all__ = [
    "TIMER_CHECK_FILE",
    "TimerCheckpoint",
    "read_timer_checkpoint",
    "write_timer_checkpoint",
]

log = logging.getLogger("rmq_spark.broker")

TIMER_CHECK_FILE = "timercheck"
TIMER_LOG_DIR = "timerlog"
_PAGE_BYTES = 4096  # RocketMQ maps one OS page
_FIELDS = struct.Struct(">7q")
_PRECISION_MS = 1000  # timerPrecisionMs: the wheel's slot width


@dataclass(frozen=True, slots=True)
class TimerCheckpoint:
    """The fields of ``config/timercheck``."""

    last_read_time_ms: int = 0
    last_timer_log_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    state_version: int = 0
    timestamp_ms: int = 0
    counter: int = 0


def read_timer_checkpoint(root: str | Path) -> TimerCheckpoint | None:
    """The store's timer checkpoint; ``None`` when there is none.

    Raises
    ------
    StoreMetadataError
        The file is shorter than its fields, or cannot be read.
    """
    path = config_path(Path(root), TIMER_CHECK_FILE)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise StoreMetadataError(str(path), f"cannot read: {err}") from err
    if len(data) < _FIELDS.size:
        raise StoreMetadataError(str(path), f"{len(data)} bytes, shorter than {_FIELDS.size}")
    return TimerCheckpoint(*_FIELDS.unpack_from(data))


def write_timer_checkpoint(
    root: str | Path, delivered_below: int, read_time_ms: int, now_ms: int
) -> bool:
    """Record that every timer message below queue offset ``delivered_below`` was delivered
    and that the wheel was read up to ``read_time_ms``; ``False`` (nothing written) when
    RocketMQ's own timer log holds data.

    Raises
    ------
    StoreIOError
        The file cannot be written.
    StoreMetadataError
        The existing file cannot be read (its data version would be lost).
    """
    root = Path(root)
    if _timer_log_has_data(root):
        log.debug("%s holds RocketMQ's timer log: its timercheck is kept", root / TIMER_LOG_DIR)
        return False
    previous = read_timer_checkpoint(root) or TimerCheckpoint()
    values = TimerCheckpoint(
        last_read_time_ms=read_time_ms - read_time_ms % _PRECISION_MS,
        last_timer_log_flush_pos=0,
        last_timer_queue_offset=delivered_below,
        master_timer_queue_offset=delivered_below,
        state_version=previous.state_version,
        timestamp_ms=now_ms,
        counter=previous.counter + 1,
    )
    page = bytearray(_PAGE_BYTES)
    _FIELDS.pack_into(page, 0, *dataclasses.astuple(values))
    path = config_path(root, TIMER_CHECK_FILE)
    try:
        make_dirs_durably(path.parent)
        write_file_atomically(path, bytes(page))
    except OSError as err:
        raise StoreIOError(f"{path}: cannot write: {err}") from err
    return True


def _timer_log_has_data(root: Path) -> bool:
    directory = root / TIMER_LOG_DIR
    try:
        return any(entry.stat().st_size > 0 for entry in directory.iterdir())
    except FileNotFoundError:
        return False
    except OSError as err:
        raise StoreMetadataError(str(directory), f"cannot list: {err}") from err
