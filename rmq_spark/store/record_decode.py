"""PURE: the bytes of one CommitLog record -> an explicit outcome (``docs/FORMAT.md`` 2).

Owns the decoder and its outcomes (``DecodedRecord``, ``SkippedRecord``, ``BlankPadding``,
``NeedMoreData``, ``Unwritten``): it checks again what the encoder checked (magic, the length
formula, BODYCRC and the record CRC property) and raises ``CorruptRecordError`` only for bytes
that cannot be a record. Also ``peek_header`` (TOTALSIZE and magic without decoding).

Does not own: the layout (``record_layout.py``), encoding (``record_encode.py``) or what a
torn tail or the end of the log is (``scan.py``, ``recovery.py``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import mmap
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from rmq_spark.errors import CorruptRecordError
from rmq_spark.store.crc import crc32
from rmq_spark.store.layout import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
)
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.record_crc import (
    RECORD_CRC_BYTES,
    RECORD_CRC_DIGITS_AT,
    RECORD_CRC_KEY,
    record_crc_of,
)
from rmq_spark.store.record_layout import (
    BODY_START,
    CACHE_MAX,
    FIXED_HEADERS,
    HEADER8,
    HOST_FLAGS,
    I8,
    I16,
    MIN_RECORD_SIZE_BYTES,
)

__all__ = [
    "BlankPadding",
    "ByteSource",
    "DecodeOutcome",
    "DecodedRecord",
    "NeedMoreData",
    "SkippedRecord",
    "Unwritten",
    "decode_record",
    "peek_header",
]


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    """A whole, valid message record at ``position``; the next one starts at ``next_position``."""

    record: MessageRecord
    position: int
    total_size: int
    magic_version: int

    @property
    def next_position(self) -> int:
        return self.position + self.total_size


@dataclass(frozen=True, slots=True)
class SkippedRecord:
    """A valid record of a topic the caller did not ask for (``topics=`` filter)."""

    position: int
    total_size: int

    @property
    def next_position(self) -> int:
        return self.position + self.total_size


@dataclass(frozen=True, slots=True)
class BlankPadding:
    """The 8-byte BLANK record: the segment's last ``remaining_bytes`` from here are unused."""

    position: int
    remaining_bytes: int


@dataclass(frozen=True, slots=True)
class NeedMoreData:
    """The buffer ends inside a record: ``have`` bytes from ``position`` on, ``need`` needed."""

    have: int
    need: int


@dataclass(frozen=True, slots=True)
class Unwritten:
    """Zero bytes (TOTALSIZE 0 and magic 0) where a record header would start."""

    position: int


ByteSource = bytes | bytearray | memoryview | mmap.mmap
"""What the decoder reads from: anything supporting the buffer protocol and slicing."""

DecodeOutcome = DecodedRecord | SkippedRecord | BlankPadding | NeedMoreData | Unwritten


def _shadow_class(cls: type) -> type:
    """A plain class with the slots of frozen dataclass ``cls``, for building ``cls`` fast.

    A frozen dataclass sets each field through ``object.__setattr__``: about 2 us for
    MessageRecord, most of a decode. Instead we fill a ``_Shadow`` (positional ``__init__``,
    same slots) and then assign ``obj.__class__ = cls``, which CPython allows between classes
    of identical layout. The result is an ordinary ``cls`` instance: same type, equality,
    hash and immutability. Checked here, at import, so a layout change fails loudly.
    """
    names = [field.name for field in dataclasses.fields(cls)]
    params = ", ".join(names)
    source = "\n".join(
        [
            "class _Shadow:",
            f"    __slots__ = {tuple(names)!r}",
            f"    def __init__(self, {params}):",
            *[f"        self.{name} = {name}" for name in names],
        ]
    )
    namespace: dict[str, Any] = {}
    exec(source, namespace)  # the technique dataclasses itself uses to build __init__
    shadow: type = namespace["_Shadow"]
    probe = tuple(range(len(names)))
    obj = shadow(*probe)
    obj.__class__ = cls  # raises TypeError if the layouts differ
    if obj != cls(*probe):
        raise TypeError(f"cannot build {cls.__name__} through a shadow class")
    return shadow


_RecordShadow = _shadow_class(MessageRecord)
_DecodedShadow = _shadow_class(DecodedRecord)
_FIXED_44 = FIXED_HEADERS[0]
_topic_in: dict[bytes, str] = {}
_host_in: dict[tuple[bytes, int], HostAddress] = {}


def _host_from(packed: bytes, port: int) -> HostAddress:
    key = (packed, port)
    host = _host_in.get(key)
    if host is None:
        if port < 0:
            # HostAddress refuses negative ports; Java writes whatever int it was given.
            raise ValueError(f"negative port {port}")
        host = HostAddress(str(ipaddress.ip_address(packed)), port)
        if len(_host_in) >= CACHE_MAX:
            _host_in.clear()
        _host_in[key] = host
    return host


def peek_header(buf: ByteSource, position: int = 0) -> tuple[int, int] | NeedMoreData:
    """``(total_size, magic)`` of the record at ``position`` without decoding it.

    ``total_size`` is TOTALSIZE as a signed int32, ``magic`` the unsigned magic code.
    Returns ``NeedMoreData`` if fewer than 8 bytes are left. Performs no validation.
    """
    have = len(buf) - position
    if have < 8:
        return NeedMoreData(have, 8)
    total, magic = HEADER8.unpack_from(buf, position)
    return total, magic


def _corrupt(path: str, position: int, reason: str) -> CorruptRecordError:
    return CorruptRecordError(path, position, reason)


def decode_record(
    buf: ByteSource,
    position: int = 0,
    *,
    path: str = "<buffer>",
    check_crc: bool = True,
    with_body: bool = True,
    topics: Collection[str] | None = None,
    reported_position: int | None = None,
) -> DecodeOutcome:
    """Decode the record starting at ``position`` of ``buf``.

    Parameters
    ----------
    buf
        ``bytes``, ``bytearray``, ``memoryview`` or ``mmap``; a ``memoryview`` avoids copies.
    position
        Byte position of the record inside ``buf`` (and inside the segment, for messages).
    path
        Label used in errors (the segment file name).
    check_crc
        Verify BODYCRC and, when the record carries one, the record CRC property
        (``docs/FORMAT.md`` 2.3). RocketMQ checks them on recovery; readers may skip them.
    with_body
        ``False`` returns the record with an empty body (still CRC-checked if asked).
    topics
        If given, a record of any other topic returns ``SkippedRecord`` (still validated).
    reported_position
        The ``position`` a ``DecodedRecord`` carries, when the caller's coordinates are not
        ``buf``'s (a reader decoding a read-ahead buffer reports physical offsets).

    Returns
    -------
    DecodedRecord
        A whole valid record; ``record.body_crc`` is the stored BODYCRC; ``record.properties``
        leaves out the record CRC property (integrity data, not a message property).
    SkippedRecord
        A whole valid record of a topic not in ``topics``.
    BlankPadding
        The BLANK end-of-file record: continue in the next segment.
    NeedMoreData
        The buffer ends before the record does.
    Unwritten
        TOTALSIZE and magic are both zero: nothing was written here.

    Raises
    ------
    CorruptRecordError
        An unknown magic, an impossible size, TOTALSIZE disagreeing with the length formula,
        a BODYCRC or record CRC mismatch, a damaged record CRC property, or a topic /
        properties that are not UTF-8.
    """
    have = len(buf) - position
    assert position >= 0, position
    if have >= 88:
        # Optimistic: IPv4/IPv4 (the usual case) in one unpack; re-read below if not.
        fields = _FIXED_44.unpack_from(buf, position)
        total, magic = fields[0], fields[1]
    elif have >= 8:
        fields = None
        total, magic = HEADER8.unpack_from(buf, position)
    else:
        if position < 0 or have < 0:
            raise ValueError(f"position {position} is outside the buffer of {len(buf)} bytes")
        return NeedMoreData(have, 8)

    if magic == MESSAGE_MAGIC_CODE_V1:
        v2 = False
    elif magic == MESSAGE_MAGIC_CODE_V2:
        v2 = True
    elif magic == BLANK_MAGIC_CODE:
        if total < END_FILE_MIN_BLANK_LENGTH:
            raise _corrupt(path, position, f"BLANK record with impossible size {total}")
        return BlankPadding(position, total)
    elif magic == 0 and total == 0:
        return Unwritten(position)
    else:
        raise _corrupt(path, position, f"bad magic code 0x{magic:08x} (TOTALSIZE {total})")

    if total < MIN_RECORD_SIZE_BYTES:
        raise _corrupt(path, position, f"impossible TOTALSIZE {total}")
    if have < total:
        return NeedMoreData(have, total)
    if fields is None:
        fields = _FIXED_44.unpack_from(buf, position)
    hosts = (fields[7] & HOST_FLAGS) >> 4
    if hosts:
        fixed = FIXED_HEADERS[hosts]
        if total < fixed.size + 3:
            raise _corrupt(path, position, f"TOTALSIZE {total} too small for IPv6 host fields")
        fields = fixed.unpack_from(buf, position)
    (
        _,
        _,
        stored_crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_ts,
        born_ip,
        born_port,
        store_ts,
        store_ip,
        store_port,
        reconsume,
        prepared,
        body_size,
    ) = fields
    body_at = position + BODY_START[hosts]
    end = position + total
    topic_len_at = body_at + body_size
    if body_size < 0 or topic_len_at + (4 if v2 else 3) > end:
        raise _corrupt(path, position, f"BODYLENGTH {body_size} does not fit TOTALSIZE {total}")
    if v2:
        (topic_size,) = I16.unpack_from(buf, topic_len_at)
        topic_at = topic_len_at + 2
    else:
        (topic_size,) = I8.unpack_from(buf, topic_len_at)
        topic_at = topic_len_at + 1
    props_len_at = topic_at + topic_size
    if topic_size < 0 or props_len_at + 2 > end:
        raise _corrupt(path, position, f"TOPICLENGTH {topic_size} does not fit TOTALSIZE {total}")
    (props_size,) = I16.unpack_from(buf, props_len_at)
    if props_len_at + 2 + props_size != end:
        raise _corrupt(
            path,
            position,
            f"TOTALSIZE {total} disagrees with the length formula "
            f"(body {body_size}, topic {topic_size}, properties {props_size})",
        )

    raw_body = buf[body_at:topic_len_at]
    props_at = props_len_at + 2
    props_end = end
    sealed = None  # (stored, computed) record CRC, if the record carries one and is checked
    # The record CRC property: its first byte is "_", and one byte off it, its first or fifth
    # byte is still "_" or "C" (one comparison rules out most records without it).
    if props_size >= RECORD_CRC_BYTES and (
        buf[end - RECORD_CRC_BYTES] == 95 or (check_crc and buf[end - 16] == 67)
    ):
        if check_crc:
            sealed = record_crc_of(buf, position, end, path)
            if sealed is not None:
                props_end = end - RECORD_CRC_BYTES
        elif buf[end - RECORD_CRC_BYTES : end - RECORD_CRC_DIGITS_AT] == RECORD_CRC_KEY:
            props_end = end - RECORD_CRC_BYTES
    # A good record CRC covers the body and BODYCRC too (RocketMQ's forceVerifyPropCRC skips
    # BODYCRC as well); after a bad one, BODYCRC says whether the body is what was damaged.
    if check_crc and (sealed is None or sealed[0] != sealed[1]):
        computed = crc32(raw_body) & 0x7FFFFFFF
        if computed != stored_crc:
            raise CorruptRecordError(
                path,
                position,
                "BODYCRC mismatch",
                stored_crc=stored_crc & 0xFFFFFFFF,
                computed_crc=computed,
            )
        if sealed is not None:
            raise CorruptRecordError(
                path, position, "record CRC mismatch", stored_crc=sealed[0], computed_crc=sealed[1]
            )

    topic_raw = bytes(buf[topic_at:props_len_at])
    topic = _topic_in.get(topic_raw)
    if topic is None:
        try:
            topic = topic_raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise _corrupt(path, position, f"topic is not UTF-8 ({err.reason})") from err
        if len(_topic_in) >= CACHE_MAX:
            _topic_in.clear()
        _topic_in[topic_raw] = topic
    if topics is not None and topic not in topics:
        return SkippedRecord(position, total)

    try:
        props = str(buf[props_at:props_end], "utf-8") if props_end > props_at else ""
        born_host = _host_in.get((born_ip, born_port)) or _host_from(born_ip, born_port)
        store_host = _host_in.get((store_ip, store_port)) or _host_from(store_ip, store_port)
    except UnicodeDecodeError as err:
        raise _corrupt(path, position, f"properties are not UTF-8 ({err.reason})") from err
    except ValueError as err:
        raise _corrupt(path, position, f"bad host address: {err}") from err

    record = _RecordShadow(
        topic,
        bytes(raw_body) if with_body else b"",
        props,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared,
        stored_crc,
    )
    record.__class__ = MessageRecord
    decoded = _DecodedShadow(
        record,
        position if reported_position is None else reported_position,
        total,
        2 if v2 else 1,
    )
    decoded.__class__ = DecodedRecord
    return decoded  # type: ignore[no-any-return]
