"""Where records start in a CommitLog segment's bytes, from their headers alone.

Owns ``hop`` (a tight loop over TOTALSIZE with a precompiled struct), ``sync_forward`` (the
first record start at or after an arbitrary byte position) and the test both use for a start
(``is_record_start``). The decoder (``columnar.py``) and the driver's planning and counting
(``planner.py``) walk the log with them; this module imports neither numpy's decoding nor
pyarrow, so a process that only plans (the stream's source runner, the read planner) does not
load the decoder.

Why the sync marker is safe: every message record stores its own PHYSICALOFFSET at byte 28,
which equals the segment's base offset plus the record's position. A candidate start needs
the 4-byte magic at +4 *and* that 8-byte value at +28, which random body bytes match with
odds near 2^-90 per position.
"""

from __future__ import annotations

import struct
from array import array

from rmq_spark.store.layout import (
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    PHYSICAL_OFFSET_POSITION,
)
from rmq_spark.store.record_layout import MIN_RECORD_SIZE_BYTES

__all__ = [
    "CHUNK_BYTES_MAX",
    "CHUNK_RECORDS_MAX",
    "hop",
    "is_record_start",
    "message_at",
    "sync_forward",
]

CHUNK_RECORDS_MAX = 16384  # records per Arrow batch (cache-sized numpy work)
CHUNK_BYTES_MAX = 64 << 20  # log bytes per Arrow batch

_SIZE = struct.Struct(">i")
_HEADER8 = struct.Struct(">iI")
_I64 = struct.Struct(">q")
_MESSAGE_MAGIC_PREFIX = b"\xda\xa3\x20"  # shared by the v1 (..A7) and v2 (..AB) magic codes
_MESSAGE_MAGICS = (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2)


def hop(
    buf: object,
    position: int,
    stop: int,
    limit: int,
    records_max: int = CHUNK_RECORDS_MAX,
    bytes_max: int = CHUNK_BYTES_MAX,
) -> tuple[array, int]:
    """Walk TOTALSIZE from ``position``: record starts before ``stop``, and where it stopped.

    Stops at the first start ``>= stop``, after ``records_max`` records or ``bytes_max``
    bytes, or at a header that cannot start a whole record ending at or before ``limit``
    (a BLANK shorter than a record, zeros, corruption, ``limit`` itself). A BLANK record
    that is as long as a message may be included; ``decode_chunk`` callers drop it.

    Returns
    -------
    (array('q') of starts, position after the last start)
    """
    starts = array("q")
    append = starts.append
    unpack = _SIZE.unpack_from
    pos = position
    end = min(stop, position + bytes_max, limit - 8 + 1)
    minimum = MIN_RECORD_SIZE_BYTES
    for _ in range(records_max):
        if pos >= end:
            break
        size = unpack(buf, pos)[0]
        if size < minimum or pos + size > limit:
            break
        append(pos)
        pos += size
    return starts, pos


def is_record_start(buf: object, base_offset: int, position: int, limit: int) -> bool:
    """Whether a message record plausibly starts at ``position``: magic, size, PHYSICALOFFSET."""
    if position < 0 or position + PHYSICAL_OFFSET_POSITION + 8 > limit:
        return False
    size, magic = _HEADER8.unpack_from(buf, position)  # type: ignore[arg-type]
    if magic not in _MESSAGE_MAGICS or size < MIN_RECORD_SIZE_BYTES or position + size > limit:
        return False
    stored = _I64.unpack_from(buf, position + PHYSICAL_OFFSET_POSITION)[0]  # type: ignore[arg-type]
    return stored == base_offset + position


def sync_forward(buf: object, base_offset: int, position: int, limit: int) -> int:
    """The first message record start in ``[position, limit)``; ``limit`` if there is none.

    Scans for the magic code with ``find`` (C speed) and accepts a candidate only if its
    PHYSICALOFFSET field equals ``base_offset`` + its position (see the module docstring).
    """
    find = buf.find  # type: ignore[attr-defined]
    search = position + 4
    while True:
        found = find(_MESSAGE_MAGIC_PREFIX, search, limit)
        if found < 0:
            return limit
        candidate = found - 4
        if is_record_start(buf, base_offset, candidate, limit):
            return candidate
        search = found + 1


def message_at(buf: object, base_offset: int, position: int, limit: int) -> int:
    """``position`` if a message record starts there, else ``limit`` (BLANK, zeros, end)."""
    return position if is_record_start(buf, base_offset, position, limit) else limit
