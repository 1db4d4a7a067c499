"""PURE: one CommitLog message record <-> bytes (``docs/FORMAT.md`` section 2).

Owns the record layout, the one definition every encoder uses: the header format and field positions
by name, the length formula, BODYCRC, the v1/v2 magic choice, the record CRC property (``__CRC32#``,
``docs/FORMAT.md`` 2.3: reserved at the end of PROPERTIES, sealed once the offsets and store
timestamp are final), the ``struct`` packers of the put path's fast encoders (``record_packer`` and
its pieces) and the 8-byte BLANK end-of-file record. Decoding returns explicit outcomes
(``DecodedRecord``, ``BlankPadding``, ``NeedMoreData``, ``Unwritten``, ``SkippedRecord``) and raises
``CorruptRecordError`` only for bytes that cannot be a record.

Does not own: files, segments, recovery policy (what a torn tail is), the properties string
syntax (``properties.py``) or message ids (``msg_id.py``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import mmap
import struct
import zlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from rmq_spark.errors import CorruptRecordError, InvalidMessageError
from rmq_spark.store.layout import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    END_FILE_MIN_BLANK_LENGTH,
    MAX_PROPERTIES_SIZE_BYTES,
    MAX_TOPIC_LENGTH_V1,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    PHYSICAL_OFFSET_POSITION,
    QUEUE_OFFSET_POSITION,
    STOREHOST_V6_FLAG,
)
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.record_crc import (
    RECORD_CRC_BYTES,
    RECORD_CRC_DIGITS_AT,
    RECORD_CRC_KEY,
    record_crc_of,
    seal_record,
    with_record_crc,
    without_record_crc,
)

__all__ = [
    "BlankPadding",
    "ByteSource",
    "DecodeOutcome",
    "DecodedRecord",
    "HEADER_FORMAT_IPV4",
    "HEADER_SIZE_IPV4",
    "MAX_TOPIC_SIZE_BYTES_V2",
    "MIN_RECORD_SIZE_BYTES",
    "NeedMoreData",
    "OFFSETS",
    "QUEUE_OFFSET_POSITION",
    "RECORD_HEAD",
    "RECORD_HOSTS",
    "RecordPacker",
    "SkippedRecord",
    "Unwritten",
    "body_crc",
    "decode_record",
    "encode_blank",
    "encode_record",
    "encode_record_mutable",
    "peek_header",
    "record_mid",
    "record_packer",
    "record_size",
    "store_timestamp_position",
]

_I32_MIN = -(1 << 31)
_I32_MAX = (1 << 31) - 1
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_HOST_FLAGS = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG

MAX_TOPIC_SIZE_BYTES_V2 = 32767
"""A v2 topic length is a signed int16."""

MIN_RECORD_SIZE_BYTES = 74 + 8 + 8 + 1
"""The smallest possible message record: IPv4 hosts, v1, empty topic, body and properties."""


# --- outcomes ---------------------------------------------------------------------------------


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


# --- structs ----------------------------------------------------------------------------------

_HEADER8 = struct.Struct(">iI")
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_BLANK = struct.Struct(">iI")


def _header_format(born_v6: bool, store_v6: bool) -> str:
    # TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG,
    # BORNTIMESTAMP, BORNHOST(ip, port), STORETIMESTAMP, STOREHOST(ip, port), RECONSUMETIMES,
    # PREPAREDTRANSACTIONOFFSET, BODYLENGTH: everything before BODY (docs/FORMAT.md 2).
    b = 16 if born_v6 else 4
    s = 16 if store_v6 else 4
    return f">iIiiiqqiq{b}siq{s}siiqi"


def _fixed_struct(born_v6: bool, store_v6: bool) -> struct.Struct:
    return struct.Struct(_header_format(born_v6, store_v6))


HEADER_FORMAT_IPV4 = _header_format(False, False)
"""The 17 header fields up to BODYLENGTH with IPv4 hosts: the put path's packers start so."""
HEADER_SIZE_IPV4 = struct.calcsize(HEADER_FORMAT_IPV4)  # 88
OFFSETS = struct.Struct(">qq")
"""QUEUEOFFSET and PHYSICALOFFSET, adjacent at ``QUEUE_OFFSET_POSITION``."""
assert PHYSICAL_OFFSET_POSITION == QUEUE_OFFSET_POSITION + 8

RecordPacker = struct.Struct
"""Packs an IPv4/v1 record up to its record CRC property in one call, from 13 pieces:
TOTALSIZE and MAGIC (``RECORD_HEAD``), BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET,
SYSFLAG, BORNTIMESTAMP, the 40 bytes from BORNHOST to BODYLENGTH (``RECORD_HOSTS``), BODY,
``mid`` (TOPICLENGTH, TOPIC, PROPERTIESLENGTH and the properties up to a key), the key and the
rest of the properties. The pieces that are the same for every record of a batch are packed
once per batch: fewer ``Struct`` fields per record is most of what a put of a small body costs.
"""
RECORD_HEAD = struct.Struct(">iI")
"""TOTALSIZE and MAGIC: a record packer's first piece."""
RECORD_HOSTS = struct.Struct(">4siq4siiqi")
"""BORNHOST (address, port), STORETIMESTAMP, STOREHOST (address, port), RECONSUMETIMES,
PREPAREDTRANSACTIONOFFSET and BODYLENGTH of an IPv4 record: a record packer's ninth piece."""
MID_HEAD = struct.Struct(">h")
"""PROPERTIESLENGTH, between the topic and the properties in a record packer's ``mid``."""
_packers: dict[tuple[int, int, int, int], struct.Struct] = {}


def record_packer(body_size: int, mid_size: int, key_size: int, tail_size: int) -> RecordPacker:
    """The ``Struct`` packing an IPv4-host v1 record (``RecordPacker``) for these sizes of
    BODY, ``mid``, key (a value filled in under the put lock: a generated UNIQ_KEY, or empty)
    and the properties after it. Cached."""
    shape = (body_size, mid_size, key_size, tail_size)
    packer = _packers.get(shape)
    if packer is None:
        packer = struct.Struct(f">8siiiqqiq40s{body_size}s{mid_size}s{key_size}s{tail_size}s")
        if len(_packers) >= _CACHE_MAX:
            _packers.clear()
        _packers[shape] = packer
    return packer


def record_mid(topic_bytes: bytes, props_size: int, head: bytes) -> bytes:
    """A record packer's ``mid``: ``topic_bytes`` (TOPICLENGTH and TOPIC), PROPERTIESLENGTH
    ``props_size`` (all of the properties) and ``head`` (the properties before the key)."""
    return topic_bytes + MID_HEAD.pack(props_size) + head


# Indexed by (sys_flag & 0x30) >> 4: bit 0 = born host IPv6, bit 1 = store host IPv6.
_FIXED = tuple(_fixed_struct(bool(i & 1), bool(i & 2)) for i in range(4))
_FIXED_44 = _FIXED[0]
_BODY_START = tuple(s.size for s in _FIXED)  # 72 + bh + sh
_STORE_TS_POSITION = tuple(48 + (20 if i & 1 else 8) for i in range(4))

# --- small bounded caches (topics and hosts repeat; bytes per record do not) -----------------

_CACHE_MAX = 4096
_topic_out: dict[str, tuple[bytes, int, int]] = {}  # topic -> (len+utf8, magic, T)
_topic_in: dict[bytes, str] = {}
_host_out: dict[HostAddress, tuple[bytes, int, bool]] = {}  # host -> (packed ip, port, v6)
_host_in: dict[tuple[bytes, int], HostAddress] = {}


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """BODYCRC of ``body``: zlib/IEEE CRC-32 masked to 31 bits (``docs/FORMAT.md`` 2).

    Examples
    --------
    >>> body_crc(b"123456789")
    1274296614
    """
    return zlib.crc32(body) & 0x7FFFFFFF


def record_size(
    topic_bytes: int,
    body_len: int,
    props_bytes: int,
    born_v6: bool = False,
    store_v6: bool = False,
    v2: bool = False,
) -> int:
    """TOTALSIZE of a record from its variable lengths (``docs/FORMAT.md`` 2, ``calMsgLength``).

    Parameters
    ----------
    topic_bytes, body_len, props_bytes
        UTF-8 byte length of the topic, body length, UTF-8 byte length of the properties.
    born_v6, store_v6
        Whether BORNHOST / STOREHOST are IPv6 (20 bytes instead of 8).
    v2
        Whether the record uses the v2 magic (2-byte topic length).

    Examples
    --------
    >>> record_size(9, 100, 0)
    200
    """
    return (
        74
        + (20 if born_v6 else 8)
        + (20 if store_v6 else 8)
        + (2 if v2 else 1)
        + body_len
        + topic_bytes
        + props_bytes
    )


def store_timestamp_position(sys_flag: int) -> int:
    """Byte position of STORETIMESTAMP inside a record with this SYSFLAG (48 + born host size)."""
    return _STORE_TS_POSITION[(sys_flag & _HOST_FLAGS) >> 4]


def _topic_entry(topic: str) -> tuple[bytes, int, int]:
    entry = _topic_out.get(topic)
    if entry is not None:
        return entry
    if not isinstance(topic, str) or not topic:
        raise InvalidMessageError("topic", f"must be a non-empty string, got {topic!r}")
    try:
        data = topic.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InvalidMessageError("topic", f"not encodable as UTF-8: {err}") from err
    size = len(data)
    # 5.x picks v2 iff the topic has more than 127 UTF-16 code units. A topic of <= 127 units
    # but > 127 UTF-8 bytes would overflow Java's signed-byte length (an unreadable record);
    # we write v2 for it instead, which every 5.x reader accepts.
    utf16_units = len(topic) + sum(1 for ch in topic if ord(ch) > 0xFFFF)
    if utf16_units <= MAX_TOPIC_LENGTH_V1 and size <= MAX_TOPIC_LENGTH_V1:
        entry = (_I8.pack(size) + data, MESSAGE_MAGIC_CODE_V1, size)
    elif size <= MAX_TOPIC_SIZE_BYTES_V2:
        entry = (_I16.pack(size) + data, MESSAGE_MAGIC_CODE_V2, size)
    else:
        raise InvalidMessageError(
            "topic", f"{size} UTF-8 bytes; at most {MAX_TOPIC_SIZE_BYTES_V2} fit a record"
        )
    if len(_topic_out) >= _CACHE_MAX:
        _topic_out.clear()
    _topic_out[topic] = entry
    return entry


def _host_entry(host: HostAddress, field: str) -> tuple[bytes, int, bool]:
    entry = _host_out.get(host)
    if entry is not None:
        return entry
    if not isinstance(host, HostAddress):
        raise InvalidMessageError(field, f"must be a HostAddress, got {host!r}")
    packed = host.packed()
    entry = (packed, host.port, len(packed) == 16)
    if len(_host_out) >= _CACHE_MAX:
        _host_out.clear()
    _host_out[host] = entry
    return entry


def _host_from(packed: bytes, port: int) -> HostAddress:
    key = (packed, port)
    host = _host_in.get(key)
    if host is None:
        if port < 0:
            # HostAddress refuses negative ports; Java writes whatever int it was given.
            raise ValueError(f"negative port {port}")
        host = HostAddress(str(ipaddress.ip_address(packed)), port)
        if len(_host_in) >= _CACHE_MAX:
            _host_in.clear()
        _host_in[key] = host
    return host


def _check_ranges(r: MessageRecord) -> None:
    """Name the first field of ``r`` outside its stored range (slow path of the encoder)."""
    checks = (
        ("queue_id", r.queue_id, 0, _I32_MAX),
        ("flag", r.flag, _I32_MIN, _I32_MAX),
        ("queue_offset", r.queue_offset, 0, _I64_MAX),
        ("physical_offset", r.physical_offset, 0, _I64_MAX),
        ("sys_flag", r.sys_flag, _I32_MIN, _I32_MAX),
        ("born_timestamp_ms", r.born_timestamp_ms, _I64_MIN, _I64_MAX),
        ("store_timestamp_ms", r.store_timestamp_ms, _I64_MIN, _I64_MAX),
        ("reconsume_times", r.reconsume_times, _I32_MIN, _I32_MAX),
        ("prepared_transaction_offset", r.prepared_transaction_offset, _I64_MIN, _I64_MAX),
    )
    for name, value, low, high in checks:
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidMessageError(name, f"must be an int, got {value!r}")
        if not low <= value <= high:
            raise InvalidMessageError(name, f"{value} is outside [{low}, {high}]")


def _encode_parts(
    r: MessageRecord, record_crc: bool = False
) -> tuple[bytes, bytes, bytes, bytes, bytes]:
    topic_prefix, magic, _ = _topic_entry(r.topic)
    born_ip, born_port, born_v6 = _host_entry(r.born_host, "born_host")
    store_ip, store_port, store_v6 = _host_entry(r.store_host, "store_host")
    body = r.body
    if not isinstance(body, bytes | bytearray | memoryview):
        raise InvalidMessageError("body", f"must be bytes, got {type(body).__name__}")
    props = r.properties
    try:
        props_data = props.encode("utf-8") if props else b""
    except (UnicodeEncodeError, AttributeError) as err:
        raise InvalidMessageError("properties", f"not a UTF-8 encodable string: {err}") from err
    if record_crc:
        props_data = with_record_crc(without_record_crc(props_data))
    props_size = len(props_data)
    if props_size > MAX_PROPERTIES_SIZE_BYTES:
        raise InvalidMessageError(
            "properties", f"{props_size} UTF-8 bytes; at most {MAX_PROPERTIES_SIZE_BYTES} allowed"
        )
    crc = zlib.crc32(body) & 0x7FFFFFFF
    if r.body_crc is not None and r.body_crc != crc:
        raise InvalidMessageError(
            "body_crc", f"given 0x{r.body_crc:08x} but the body's CRC is 0x{crc:08x}"
        )
    hosts = (16 if born_v6 else 0) | (32 if store_v6 else 0)
    sys_flag = (r.sys_flag & ~_HOST_FLAGS) | hosts
    body_size = len(body)
    fixed = _FIXED[hosts >> 4]
    total = fixed.size + body_size + len(topic_prefix) + 2 + props_size
    if total > _I32_MAX:
        raise InvalidMessageError("body", f"record of {total} bytes does not fit an int32 size")
    try:
        head = fixed.pack(
            total,
            magic,
            crc,
            r.queue_id,
            r.flag,
            r.queue_offset,
            r.physical_offset,
            sys_flag,
            r.born_timestamp_ms,
            born_ip,
            born_port,
            r.store_timestamp_ms,
            store_ip,
            store_port,
            r.reconsume_times,
            r.prepared_transaction_offset,
            body_size,
        )
    except struct.error as err:
        _check_ranges(r)
        raise InvalidMessageError("record", f"a field does not fit its type: {err}") from err
    if r.queue_id < 0 or r.queue_offset < 0 or r.physical_offset < 0:
        _check_ranges(r)
    return head, bytes(body), topic_prefix, _I16.pack(props_size), props_data


def encode_record(record: MessageRecord, *, record_crc: bool = False) -> bytes:
    """Encode one message record, byte-exact per ``docs/FORMAT.md`` 2.

    Computes BODYCRC and TOTALSIZE, picks v1 or v2 magic from the topic length (v2 iff the
    topic has more than 127 UTF-16 code units, as 5.x's ``autoMessageVersionOnTopicLen``;
    also when its UTF-8 form exceeds 127 bytes, where Java would overflow) and sets SYSFLAG's
    IPv6 bits (0x10, 0x20) from the host address types, whatever ``record.sys_flag`` says.

    Parameters
    ----------
    record
        The message. ``body_crc`` may be ``None`` (computed) or must equal the body's CRC.
    record_crc
        Append the record CRC property (``docs/FORMAT.md`` 2.3) to the properties, replacing
        any ``__CRC32#`` entry they hold, and seal it over the record's final bytes.

    Returns
    -------
    bytes
        The record, TOTALSIZE bytes long.

    Raises
    ------
    InvalidMessageError
        Empty topic, topic over 32767 UTF-8 bytes, properties over 32767 bytes, a negative
        queue id / queue offset / physical offset, an int outside its int32/int64 field,
        a ``body_crc`` that does not match the body.
    """
    if not record_crc:
        return b"".join(_encode_parts(record))
    buf = bytearray().join(_encode_parts(record, True))
    seal_record(buf, 0, len(buf))
    return bytes(buf)


def encode_record_mutable(record: MessageRecord, *, record_crc: bool = False) -> bytearray:
    """``encode_record`` into a ``bytearray`` whose offsets and store timestamp the put path
    fills in under its lock; with ``record_crc`` the CRC is reserved, not yet sealed."""
    return bytearray().join(_encode_parts(record, record_crc))


def encode_blank(remaining_bytes: int) -> bytes:
    """The 8-byte BLANK record: int32 ``remaining_bytes`` (to the end of the file), BLANK magic.

    Raises
    ------
    ValueError
        ``remaining_bytes`` below 8 or above int32 max.
    """
    if not END_FILE_MIN_BLANK_LENGTH <= remaining_bytes <= _I32_MAX:
        raise ValueError(
            f"remaining_bytes: a BLANK record covers 8..{_I32_MAX} bytes, got {remaining_bytes}"
        )
    return _BLANK.pack(remaining_bytes, BLANK_MAGIC_CODE)


def peek_header(buf: ByteSource, position: int = 0) -> tuple[int, int] | NeedMoreData:
    """``(total_size, magic)`` of the record at ``position`` without decoding it.

    ``total_size`` is TOTALSIZE as a signed int32, ``magic`` the unsigned magic code.
    Returns ``NeedMoreData`` if fewer than 8 bytes are left. Performs no validation.
    """
    have = len(buf) - position
    if have < 8:
        return NeedMoreData(have, 8)
    total, magic = _HEADER8.unpack_from(buf, position)
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
        total, magic = _HEADER8.unpack_from(buf, position)
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
    hosts = (fields[7] & _HOST_FLAGS) >> 4
    if hosts:
        fixed = _FIXED[hosts]
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
    body_at = position + _BODY_START[hosts]
    end = position + total
    topic_len_at = body_at + body_size
    if body_size < 0 or topic_len_at + (4 if v2 else 3) > end:
        raise _corrupt(path, position, f"BODYLENGTH {body_size} does not fit TOTALSIZE {total}")
    if v2:
        (topic_size,) = _I16.unpack_from(buf, topic_len_at)
        topic_at = topic_len_at + 2
    else:
        (topic_size,) = _I8.unpack_from(buf, topic_len_at)
        topic_at = topic_len_at + 1
    props_len_at = topic_at + topic_size
    if topic_size < 0 or props_len_at + 2 > end:
        raise _corrupt(path, position, f"TOPICLENGTH {topic_size} does not fit TOTALSIZE {total}")
    (props_size,) = _I16.unpack_from(buf, props_len_at)
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
        computed = zlib.crc32(raw_body) & 0x7FFFFFFF
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
        if len(_topic_in) >= _CACHE_MAX:
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
