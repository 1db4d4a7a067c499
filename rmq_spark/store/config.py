"""StoreConfig: the ``[store]`` config section (the CommitLog store engine).

Owns the store's settings, their defaults (RocketMQ's ``MessageStoreConfig`` where one exists,
RocketMQ MessageStoreConfig) and their validation. Does not own loading TOML (that is
``rmq_spark/config.py``) nor the broker's settings.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.store.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_message_delay_level

__all__ = ["FlushPolicy", "IoMode", "StoreConfig"]


class FlushPolicy(enum.Enum):
    """When a put is acknowledged (RocketMQ ``flushDiskType``)."""

    SYNC = "SYNC"  # after an fsync covers the record (group commit)
    ASYNC = "ASYNC"  # after the record is written; a background thread fsyncs periodically


class IoMode(enum.Enum):
    """How segment files are written and read (bench/bench_put.py measures both).

    MMAP is the default: a put is a memcpy into the shared mapping, with no system call, which
    made single puts of 100 B bodies about 10-15 % cheaper in CPU than PWRITE in
    bench_put.py; batches (one write per batch either way) came out equal within noise. The
    files are preallocated with fallocate, so a write through the mapping cannot hit a full
    disk (which would be SIGBUS rather than ENOSPC).
    """

    MMAP = "MMAP"  # shared memory map of the preallocated file (RocketMQ's MappedFile)
    PWRITE = "PWRITE"  # os.pwrite / os.pread on a file descriptor


@dataclass(frozen=True, slots=True)
class StoreConfig:
    root_dir: Path = Path("store")  # store root: commitlog/, checkpoint, abort, lock live here
    segment_size_bytes: int = 1 << 30  # CommitLog segment file size (RocketMQ: 1 GiB)
    flush_policy: FlushPolicy = FlushPolicy.SYNC  # SYNC: fsync before ack; ASYNC: periodic fsync
    flush_interval_ms: int = 500  # ASYNC: how often the background thread fsyncs
    sync_flush_timeout_ms: int = 5000  # SYNC: wait this long for the fsync, then FLUSH_DISK_TIMEOUT
    confirm_publish_interval_ms: int = 10  # ASYNC: how often the written offset is published
    max_message_size_bytes: int = 4 * 1024 * 1024  # largest body accepted (RocketMQ: 4 MiB)
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL  # delay levels, "1s 5s ... 2h"
    check_crc_on_recover: bool = True  # verify BODYCRC while recovering the tail of the log
    append_record_crc: bool = True  # write the __CRC32# record CRC property (RocketMQ 5.2+)
    io_mode: IoMode = IoMode.MMAP  # segment file access: MMAP or PWRITE
    store_host: str = "127.0.0.1:10911"  # ip:port stored in STOREHOSTADDRESS and offset msg ids
    idempotency_window_messages: int = 100_000  # recent (topic, UNIQ_KEY) kept for dedupe; 0: off
    snapshot_interval_ms: int = 10_000  # how often the queue-offset snapshot is rewritten
    file_reserved_time_hours: int = 72  # segments older than this are deleted (retention)
    disk_max_used_space_ratio: float = 0.75  # above this disk usage, processed old segments go
    disk_emergency_used_space_ratio: float = 0.95  # above this, unprocessed ones go too (ERROR)
    delete_file_batch_max: int = 10  # at most this many segments deleted per retention round
    clean_resource_interval_ms: int = 10_000  # how often retention runs; 0: only when called
    warm_ahead_bytes: int = 16 << 20  # SYNC: zero-fill the active segment this far ahead; 0: off
    stage_writes: bool = True  # SYNC: append to memory, write to the file just before each fsync
    io_uring: bool = True  # SYNC put_async: fsync through io_uring when the kernel allows it
    consume_queue: bool = True  # dispatch acknowledged records into consumequeue/ (RocketMQ's)
    consume_queue_file_units: int = 300_000  # units per consumequeue/ file (RocketMQ: 300,000)
    consume_queue_flush_interval_ms: int = 1000  # how often consumequeue/ files are fsynced
    message_index: bool = True  # with consume_queue: RocketMQ's index/ (keys, UNIQ_KEY)
    index_hash_slots: int = 5_000_000  # slots per index/ file (RocketMQ maxHashSlotNum)
    index_entries: int = 20_000_000  # entries per index/ file (RocketMQ maxIndexNum)

    def __post_init__(self) -> None:
        if not str(self.root_dir):
            raise ValueError("root_dir: must not be empty")
        if not 512 <= self.segment_size_bytes <= (1 << 31) - 1:
            raise ValueError(
                f"segment_size_bytes: must be in [512, 2147483647], got {self.segment_size_bytes}"
            )
        _positive("flush_interval_ms", self.flush_interval_ms)
        _positive("sync_flush_timeout_ms", self.sync_flush_timeout_ms)
        _positive("confirm_publish_interval_ms", self.confirm_publish_interval_ms)
        _positive("max_message_size_bytes", self.max_message_size_bytes)
        _positive("snapshot_interval_ms", self.snapshot_interval_ms)
        _positive("file_reserved_time_hours", self.file_reserved_time_hours)
        _positive("delete_file_batch_max", self.delete_file_batch_max)
        _positive("consume_queue_file_units", self.consume_queue_file_units)
        _positive("consume_queue_flush_interval_ms", self.consume_queue_flush_interval_ms)
        _positive("index_hash_slots", self.index_hash_slots)
        if self.index_entries < 2:  # entry 0 is never used
            raise ValueError(f"index_entries: must be >= 2, got {self.index_entries}")
        if self.idempotency_window_messages < 0:
            raise ValueError(
                f"idempotency_window_messages: must be >= 0, got {self.idempotency_window_messages}"
            )
        if self.warm_ahead_bytes < 0:
            raise ValueError(f"warm_ahead_bytes: must be >= 0, got {self.warm_ahead_bytes}")
        if self.clean_resource_interval_ms < 0:
            raise ValueError(
                f"clean_resource_interval_ms: must be >= 0, got {self.clean_resource_interval_ms}"
            )
        if not 0.0 < self.disk_max_used_space_ratio <= 1.0:
            raise ValueError(
                "disk_max_used_space_ratio: must be in (0, 1], "
                f"got {self.disk_max_used_space_ratio}"
            )
        if not self.disk_max_used_space_ratio < self.disk_emergency_used_space_ratio <= 1.0:
            raise ValueError(
                "disk_emergency_used_space_ratio: must be in (disk_max_used_space_ratio, 1], "
                f"got {self.disk_emergency_used_space_ratio}"
            )
        try:
            parse_message_delay_level(self.message_delay_level)
        except ValueError as err:
            raise ValueError(f"message_delay_level: {err}") from None
        _check_host(self.store_host)

    @property
    def commitlog_dir(self) -> Path:
        """``<root_dir>/commitlog``."""
        return self.root_dir / "commitlog"


def _positive(name: str, value: int) -> None:
    if value <= 0:
        raise ValueError(f"{name}: must be > 0, got {value}")


def _check_host(text: str) -> None:
    from rmq_spark.store.message import HostAddress

    try:
        HostAddress.parse(text)
    except ValueError as err:
        raise ValueError(f"store_host: {err}") from None
