"""Test support for the Spark source: a tiny CommitLog writer and the per-record reference rows.

``LogWriter`` lays out a store exactly as RocketMQ does (20-digit segment names, files
preallocated with zeros, an 8-byte BLANK where a record does not fit, ``checkpoint`` with
``confirmPhyOffset`` at byte 32) using the codec, so that tests can build any shape of log
(rolls, IPv6 hosts, v2 topics, odd properties) in milliseconds. ``reference_rows`` turns
records into the source's output rows with the *per-record* codec and properties parser,
the oracle the columnar decoder is compared with.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import struct
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from store_helpers import keys_of, tags_of, uniq_key_of

from rmq_spark.spark.schema import COLUMN_NAMES, TRANSACTION_TYPE_NAMES
from rmq_spark.store.codec import decode_record, encode_blank, encode_record
from rmq_spark.store.layout import segment_name
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.msg_id import offset_msg_id
from rmq_spark.store.properties import delay_level_of, encode_properties, parse_properties

__all__ = ["LogWriter", "make_record", "reference_row", "reference_rows"]

STORE_HOST = HostAddress("10.0.0.7", 10911)
BORN_HOST = HostAddress("192.168.1.20", 52001)
BASE_TS_MS = 1_700_000_000_000


def make_record(
    index: int,
    *,
    topic: str | None = None,
    body: bytes | None = None,
    properties: str | None = None,
    **fields: object,
) -> MessageRecord:
    """A record with deterministic fields derived from ``index`` (offsets filled by the writer)."""
    if properties is None:
        props = {"TAGS": f"tag{index % 3}", "KEYS": f"k{index} order-{index % 7}"}
        props["UNIQ_KEY"] = f"{index:032X}"
        if index % 5 == 0:
            props["DELAY"] = str(index % 18 + 1)
        properties = encode_properties(props)
    record = MessageRecord(
        topic=topic if topic is not None else ("TopicA" if index % 3 else "TopicB"),
        body=body if body is not None else f"body-{index}-".encode() * (index % 4 + 1),
        properties=properties,
        queue_id=index % 4,
        flag=index % 2,
        born_timestamp_ms=BASE_TS_MS + index,
        born_host=BORN_HOST,
        store_timestamp_ms=BASE_TS_MS + 10 * index,
        store_host=STORE_HOST,
        reconsume_times=index % 3,
    )
    return replace(record, **fields)  # type: ignore[arg-type]


class LogWriter:
    """Append records to a store directory laid out like RocketMQ's (see the module docstring)."""

    def __init__(self, store_dir: Path, segment_size_bytes: int = 4096) -> None:
        self.store_dir = store_dir
        self.segment_size_bytes = segment_size_bytes
        self.commitlog = store_dir / "commitlog"
        self.commitlog.mkdir(parents=True, exist_ok=True)
        self.end_offset = 0  # next physical offset to write
        self.records: list[MessageRecord] = []  # as stored (offsets filled in)
        self._queue_offsets: dict[tuple[str, int], int] = {}
        self._lock_fd: int | None = None
        self._ensure_segment(0)
        self.set_confirm(0)

    def _ensure_segment(self, base: int) -> Path:
        path = self.commitlog / segment_name(base)
        if not path.exists():
            with open(path, "wb") as f:
                f.truncate(self.segment_size_bytes)
        return path

    def append(self, record: MessageRecord) -> MessageRecord:
        """Write ``record`` at the end (rolling to a new segment if needed); returns it stored."""
        queue_key = (record.topic, record.queue_id)
        size = len(encode_record(record))
        base = self.end_offset - self.end_offset % self.segment_size_bytes
        position = self.end_offset - base
        if size + 8 > self.segment_size_bytes:
            raise ValueError(
                f"record of {size} bytes cannot fit a {self.segment_size_bytes} segment"
            )
        if position + size + 8 > self.segment_size_bytes:
            remaining = self.segment_size_bytes - position
            self._write(base, position, encode_blank(remaining))
            base += self.segment_size_bytes
            position = 0
            self.end_offset = base
        stored = replace(
            record,
            physical_offset=base + position,
            queue_offset=self._queue_offsets.get(queue_key, 0),
        )
        data = encode_record(stored)
        self._write(base, position, data)
        self._queue_offsets[queue_key] = stored.queue_offset + 1
        self.end_offset = base + position + len(data)
        stored = decode_record(data, 0).record  # type: ignore[union-attr]
        self.records.append(stored)
        return stored

    def extend(self, records: Iterable[MessageRecord]) -> list[MessageRecord]:
        return [self.append(r) for r in records]

    def _write(self, base: int, position: int, data: bytes) -> None:
        path = self._ensure_segment(base)
        with open(path, "r+b") as f:
            f.seek(position)
            f.write(data)

    def roll_blank(self) -> None:
        """Fill the rest of the current segment with a BLANK record and start the next one."""
        base = self.end_offset - self.end_offset % self.segment_size_bytes
        position = self.end_offset - base
        if position == 0:
            return
        self._write(base, position, encode_blank(self.segment_size_bytes - position))
        self.end_offset = base + self.segment_size_bytes
        self._ensure_segment(self.end_offset)

    def set_confirm(self, confirm_offset: int | None = None, flushed: int | None = None) -> None:
        """Write ``confirmPhyOffset`` (default: the current end) into ``checkpoint``, and
        ``masterFlushedOffset`` when ``flushed`` is given."""
        value = self.end_offset if confirm_offset is None else confirm_offset
        path = self.store_dir / "checkpoint"
        data = bytearray(path.read_bytes() if path.exists() else bytes(4096))
        if flushed is not None:
            struct.pack_into(">q", data, 24, flushed)
        struct.pack_into(">q", data, 32, value)
        path.write_bytes(bytes(data))

    @contextmanager
    def broker_running(self) -> Iterator[None]:
        """Hold the store's ``lock`` (POSIX lock on byte 0) and ``abort``, as a broker does."""
        fd = os.open(self.store_dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        (self.store_dir / "abort").touch()
        try:
            yield
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
            os.close(fd)
            (self.store_dir / "abort").unlink()

    def segment_path(self, base: int) -> Path:
        return self.commitlog / segment_name(base)


def _ts(ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)


def reference_row(record: MessageRecord, *, include_body: bool = True) -> dict[str, object]:
    """The source's output row for ``record``, computed one record at a time."""
    props = parse_properties(record.properties)
    try:
        delay: int | None = delay_level_of(props) if "DELAY" in props else None
    except ValueError:
        delay = None
    row = {
        "topic": record.topic,
        "queue_id": record.queue_id,
        "queue_offset": record.queue_offset,
        "physical_offset": record.physical_offset,
        "total_size": len(encode_record(record)),
        "body": bytes(record.body) if include_body else None,
        "tags": tags_of(props),
        "keys": keys_of(props),
        "properties": props,
        "msg_id": offset_msg_id(record.store_host, record.physical_offset),
        "uniq_key": uniq_key_of(props),
        "born_timestamp": _ts(record.born_timestamp_ms),
        "born_host": str(record.born_host),
        "store_timestamp": _ts(record.store_timestamp_ms),
        "store_host": str(record.store_host),
        "sys_flag": record.sys_flag,
        "flag": record.flag,
        "reconsume_times": record.reconsume_times,
        "prepared_transaction_offset": record.prepared_transaction_offset,
        "body_crc": record.body_crc,
        "transaction_type": TRANSACTION_TYPE_NAMES[(record.sys_flag & 0xC) >> 2],
        "delay_level": delay,
    }
    assert tuple(row) == COLUMN_NAMES
    return row


def reference_rows(
    records: Iterable[MessageRecord], *, include_body: bool = True
) -> list[dict[str, object]]:
    return [reference_row(r, include_body=include_body) for r in records]
