"""PURE: the CommitLog message record layout (``docs/FORMAT.md`` section 2), the one
definition every encoder and decoder uses.

Owns the header format and field positions by name, the length formula (``record_size``),
BODYCRC, the header ``struct``s by host kind, the ``struct`` packers of the put path's fast
encoders (``record_packer`` and its pieces) and the size limits of a record.

Does not own: turning a ``MessageRecord`` into bytes (``record_encode.py``) or bytes into
outcomes (``record_decode.py``).
"""

from __future__ import annotations

import re
import struct

from rmq_spark.store.crc import crc32
from rmq_spark.store.layout import (
    BORNHOST_V6_FLAG,
    PHYSICAL_OFFSET_POSITION,
    QUEUE_OFFSET_POSITION,
    STOREHOST_V6_FLAG,
)

__all__ = [
    "BODY_START",
    "BORN_HOST_POSITION",
    "BORN_TIMESTAMP_POSITION",
    "CACHE_MAX",
    "FIXED_HEADERS",
    "HEADER8",
    "HEADER_FIELDS",
    "HEADER_FIELD_NAMES",
    "HEADER_FORMAT_IPV4",
    "HEADER_SIZE_IPV4",
    "HOST_FLAGS",
    "HOST_FLAGS_BYTE",
    "HOST_FLAGS_SHIFT",
    "I16",
    "I32_MAX",
    "I8",
    "MAGIC_POSITION",
    "MAX_TOPIC_SIZE_BYTES_V2",
    "MIN_RECORD_SIZE_BYTES",
    "OFFSETS",
    "PHYSICAL_OFFSET_POSITION",
    "QUEUE_OFFSET_POSITION",
    "RECORD_HEAD",
    "RECORD_HOSTS",
    "RecordPacker",
    "STORE_TIMESTAMP_REACH",
    "SYS_FLAG_POSITION",
    "body_crc",
    "peek_store_timestamp",
    "record_mid",
    "record_packer",
    "record_size",
    "store_timestamp_position",
]

I32_MAX = (1 << 31) - 1
HOST_FLAGS = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG
"""SYSFLAG's two IPv6 bits; ``(sys_flag & HOST_FLAGS) >> 4`` indexes ``FIXED_HEADERS``."""

CACHE_MAX = 4096
"""Bound of the codec's small caches (topics and hosts repeat; bytes per record do not)."""

MAX_TOPIC_SIZE_BYTES_V2 = 32767
"""A v2 topic length is a signed int16."""

MIN_RECORD_SIZE_BYTES = 74 + 8 + 8 + 1
"""The smallest possible message record: IPv4 hosts, v1, empty topic, body and properties."""


# --- structs ----------------------------------------------------------------------------------

HEADER8 = struct.Struct(">iI")
"""TOTALSIZE and MAGIC, the first 8 bytes of every record (BLANK included)."""
I8 = struct.Struct(">b")
I16 = struct.Struct(">h")


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
        if len(_packers) >= CACHE_MAX:
            _packers.clear()
        _packers[shape] = packer
    return packer


def record_mid(topic_bytes: bytes, props_size: int, head: bytes) -> bytes:
    """A record packer's ``mid``: ``topic_bytes`` (TOPICLENGTH and TOPIC), PROPERTIESLENGTH
    ``props_size`` (all of the properties) and ``head`` (the properties before the key)."""
    return topic_bytes + MID_HEAD.pack(props_size) + head


FIXED_HEADERS = tuple(_fixed_struct(bool(i & 1), bool(i & 2)) for i in range(4))
"""Header structs up to BODYLENGTH, by host kind: bit 0 born host IPv6, bit 1 store host IPv6."""
BODY_START = tuple(s.size for s in FIXED_HEADERS)  # 72 + bh + sh
_STORE_TS_POSITION = tuple(48 + (20 if i & 1 else 8) for i in range(4))


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """BODYCRC of ``body``: zlib/IEEE CRC-32 masked to 31 bits (``docs/FORMAT.md`` 2).

    Examples
    --------
    >>> body_crc(b"123456789")
    1274296614
    """
    return crc32(body) & 0x7FFFFFFF


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


HEADER_FIELD_NAMES = (
    "total_size",
    "magic",
    "body_crc",
    "queue_id",
    "flag",
    "queue_offset",
    "physical_offset",
    "sys_flag",
    "born_ts",
    "born_host",
    "born_port",
    "store_ts",
    "store_host",
    "store_port",
    "reconsume_times",
    "prepared_offset",
    "body_size",
)
"""The header fields up to BODYLENGTH, in order: the items of ``FIXED_HEADERS``' formats."""


def _field_positions(born_v6: bool, store_v6: bool) -> dict[str, tuple[int, str]]:
    """``HEADER_FIELD_NAMES`` -> (position, numpy format), read off the header's ``struct``
    format: its one definition."""
    items = re.findall(r"(\d*)([a-zA-Z])", _header_format(born_v6, store_v6))
    fields: dict[str, tuple[int, str]] = {}
    position = 0
    for name, (count, code) in zip(HEADER_FIELD_NAMES, items, strict=True):
        form = f"S{count}" if code == "s" else f">{code.lower() if code == 'I' else code}"
        form = ">u4" if code == "I" else form
        fields[name] = (position, form)
        position += struct.calcsize(f">{count}{code}")
    return fields


HEADER_FIELDS = tuple(_field_positions(bool(i & 1), bool(i & 2)) for i in range(4))
"""``name -> (byte position, numpy format)`` of each header field up to BODYLENGTH, by host
kind (indexed as ``FIXED_HEADERS``): what the Spark source's numpy walkers read by."""
MAGIC_POSITION = HEADER_FIELDS[0]["magic"][0]
SYS_FLAG_POSITION = HEADER_FIELDS[0]["sys_flag"][0]
HOST_FLAGS_BYTE = SYS_FLAG_POSITION + 3
"""SYSFLAG's low byte (big-endian), which holds ``HOST_FLAGS``."""
HOST_FLAGS_SHIFT = 4
"""``(sys_flag & HOST_FLAGS) >> HOST_FLAGS_SHIFT``: the host kind, an index of ``FIXED_HEADERS``."""
BORN_TIMESTAMP_POSITION = HEADER_FIELDS[0]["born_ts"][0]
BORN_HOST_POSITION = HEADER_FIELDS[0]["born_host"][0]
"""BORNHOST (address, port); STORETIMESTAMP, STOREHOST, RECONSUMETIMES follow it."""
STORE_TIMESTAMP_REACH = 80
"""Bytes from a record's start that cover its STORETIMESTAMP whatever its hosts (76, 80
rounded)."""
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
assert HOST_FLAGS >> HOST_FLAGS_SHIFT == 3
assert HEADER_FIELDS[0]["physical_offset"][0] == PHYSICAL_OFFSET_POSITION
assert all(
    f["body_size"][0] + 4 == start and f["store_ts"][0] == at
    for f, start, at in zip(HEADER_FIELDS, BODY_START, _STORE_TS_POSITION, strict=True)
)


def peek_store_timestamp(buf: bytes | memoryview, at: int, physical_offset: int) -> int | None:
    """STORETIMESTAMP of the record at ``buf[at:]`` if it says it is at ``physical_offset``;
    ``None`` when fewer than ``STORE_TIMESTAMP_REACH`` bytes are there or it says otherwise
    (a read of one header field, for the binary searches by time)."""
    if len(buf) - at < STORE_TIMESTAMP_REACH:
        return None
    if _I64.unpack_from(buf, at + PHYSICAL_OFFSET_POSITION)[0] != physical_offset:
        return None
    sys_flag = _I32.unpack_from(buf, at + SYS_FLAG_POSITION)[0]
    return int(_I64.unpack_from(buf, at + store_timestamp_position(sys_flag))[0])


def store_timestamp_position(sys_flag: int) -> int:
    """Byte position of STORETIMESTAMP inside a record with this SYSFLAG (48 + born host size)."""
    return _STORE_TS_POSITION[(sys_flag & HOST_FLAGS) >> 4]
