"""PURE: a ``MessageRecord`` -> the bytes of one CommitLog record (``docs/FORMAT.md`` 2).

Owns the general encoder: field validation (check before writing), the v1/v2 magic choice from
the topic length, SYSFLAG's host bits from the address types, the record CRC property
(``docs/FORMAT.md`` 2.3: reserved at the end of PROPERTIES and sealed over the final bytes) and
the 8-byte BLANK end-of-file record.

Does not own: the layout itself (``record_layout.py``), decoding (``record_decode.py``) or the
put path's fast packers (``record_layout.record_packer``, used by ``put_encode``/``raw``).
"""

from __future__ import annotations

import struct

from rmq_spark.errors import InvalidMessageError
from rmq_spark.store.crc import crc32
from rmq_spark.store.layout import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    MAX_PROPERTIES_SIZE_BYTES,
    MAX_TOPIC_LENGTH_V1,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
)
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.record_crc import seal_record, with_record_crc, without_record_crc
from rmq_spark.store.record_layout import (
    CACHE_MAX,
    FIXED_HEADERS,
    HOST_FLAGS,
    I8,
    I16,
    I32_MAX,
    MAX_TOPIC_SIZE_BYTES_V2,
)

__all__ = ["encode_blank", "encode_record", "encode_record_mutable"]

_I32_MIN = -(1 << 31)
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_BLANK = struct.Struct(">iI")

_topic_out: dict[str, tuple[bytes, int, int]] = {}  # topic -> (len+utf8, magic, T)
_host_out: dict[HostAddress, tuple[bytes, int, bool]] = {}  # host -> (packed ip, port, v6)


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
        entry = (I8.pack(size) + data, MESSAGE_MAGIC_CODE_V1, size)
    elif size <= MAX_TOPIC_SIZE_BYTES_V2:
        entry = (I16.pack(size) + data, MESSAGE_MAGIC_CODE_V2, size)
    else:
        raise InvalidMessageError(
            "topic", f"{size} UTF-8 bytes; at most {MAX_TOPIC_SIZE_BYTES_V2} fit a record"
        )
    if len(_topic_out) >= CACHE_MAX:
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
    if len(_host_out) >= CACHE_MAX:
        _host_out.clear()
    _host_out[host] = entry
    return entry


def _check_ranges(r: MessageRecord) -> None:
    """Name the first field of ``r`` outside its stored range (slow path of the encoder)."""
    checks = (
        ("queue_id", r.queue_id, 0, I32_MAX),
        ("flag", r.flag, _I32_MIN, I32_MAX),
        ("queue_offset", r.queue_offset, 0, _I64_MAX),
        ("physical_offset", r.physical_offset, 0, _I64_MAX),
        ("sys_flag", r.sys_flag, _I32_MIN, I32_MAX),
        ("born_timestamp_ms", r.born_timestamp_ms, _I64_MIN, _I64_MAX),
        ("store_timestamp_ms", r.store_timestamp_ms, _I64_MIN, _I64_MAX),
        ("reconsume_times", r.reconsume_times, _I32_MIN, I32_MAX),
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
    crc = crc32(body) & 0x7FFFFFFF
    if r.body_crc is not None and r.body_crc != crc:
        raise InvalidMessageError(
            "body_crc", f"given 0x{r.body_crc:08x} but the body's CRC is 0x{crc:08x}"
        )
    hosts = (16 if born_v6 else 0) | (32 if store_v6 else 0)
    sys_flag = (r.sys_flag & ~HOST_FLAGS) | hosts
    body_size = len(body)
    fixed = FIXED_HEADERS[hosts >> 4]
    total = fixed.size + body_size + len(topic_prefix) + 2 + props_size
    if total > I32_MAX:
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
    return head, bytes(body), topic_prefix, I16.pack(props_size), props_data


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
    if not END_FILE_MIN_BLANK_LENGTH <= remaining_bytes <= I32_MAX:
        raise ValueError(
            f"remaining_bytes: a BLANK record covers 8..{I32_MAX} bytes, got {remaining_bytes}"
        )
    return _BLANK.pack(remaining_bytes, BLANK_MAGIC_CODE)
