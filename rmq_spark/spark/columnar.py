"""Columnar decoding: many CommitLog records at once, from a segment map into Arrow batches.

Owns finding record starts (``hop``: a tight loop over TOTALSIZE with a precompiled struct;
``sync_forward``: the first record start at or after an arbitrary byte position), checking
every record's structure in numpy (magic, PHYSICALOFFSET == segment base + position, the
length formula, BODYCRC), and building the ``schema.ARROW_SCHEMA`` columns without a Python
object per row. ``read_slice`` applies all of it to one ``offsets.SegmentSlice``.

Why the sync marker is safe: every message record stores its own PHYSICALOFFSET at byte 28,
which equals the segment's base offset plus the record's position. A candidate start needs
the 4-byte magic at +4 *and* that 8-byte value at +28, which random body bytes match with
odds near 2^-90 per position. A partition whose end was cut by byte count also checks that
the record where its own chain stops is the one ``sync_forward`` finds there (what the next
partition starts from), so even a crafted body cannot make a record read twice or skipped:
the query fails instead.

Does not own which slices to read (``offsets.py``), files (``segments.py``) or Spark.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.errors import CorruptRecordError
from rmq_spark.spark.arrow_views import gather_rows, hex_strings, slices_to_array
from rmq_spark.spark.columnar_properties import parse_properties_column
from rmq_spark.spark.offsets import SegmentSlice
from rmq_spark.spark.schema import ARROW_SCHEMA, TRANSACTION_TYPE_NAMES
from rmq_spark.store.codec import (
    MIN_RECORD_SIZE_BYTES,
    DecodedRecord,
    NeedMoreData,
    decode_record,
)
from rmq_spark.store.layout import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    PHYSICAL_OFFSET_POSITION,
)

__all__ = [
    "CHUNK_RECORDS_MAX",
    "DecodeSettings",
    "decode_chunk",
    "hop",
    "is_record_start",
    "read_slice",
    "sync_forward",
]

CHUNK_RECORDS_MAX = 65536  # records per Arrow batch
CHUNK_BYTES_MAX = 64 << 20  # log bytes per Arrow batch

_SIZE = struct.Struct(">i")
_HEADER8 = struct.Struct(">iI")
_I64 = struct.Struct(">q")
_MESSAGE_MAGIC_PREFIX = b"\xda\xa3\x20"  # shared by the v1 (..A7) and v2 (..AB) magic codes
_MESSAGE_MAGICS = (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2)
_TS_TYPE = ARROW_SCHEMA.field("born_timestamp").type
_TX_NAMES = pa.array(TRANSACTION_TYPE_NAMES, pa.string())


def _header_dtype(layout: int) -> np.dtype:
    """Fixed part of a record with host layout ``layout`` (bit 0 born IPv6, bit 1 store IPv6)."""
    bh = 20 if layout & 1 else 8
    sh = 20 if layout & 2 else 8
    fields = [
        ("total_size", ">i4", 0),
        ("magic", ">u4", 4),
        ("body_crc", ">i4", 8),
        ("queue_id", ">i4", 12),
        ("flag", ">i4", 16),
        ("queue_offset", ">i8", 20),
        ("physical_offset", ">i8", 28),
        ("sys_flag", ">i4", 36),
        ("born_ts", ">i8", 40),
        ("born_port", ">i4", 48 + bh - 4),
        ("store_ts", ">i8", 48 + bh),
        ("store_port", ">i4", 56 + bh + sh - 4),
        ("reconsume_times", ">i4", 56 + bh + sh),
        ("prepared_offset", ">i8", 60 + bh + sh),
        ("body_size", ">i4", 68 + bh + sh),
    ]
    return np.dtype(
        {
            "names": [f[0] for f in fields],
            "formats": [f[1] for f in fields],
            "offsets": [f[2] for f in fields],
            "itemsize": 72 + bh + sh,
        }
    )


_HEADER_DTYPES = tuple(_header_dtype(layout) for layout in range(4))


@dataclass(frozen=True, slots=True)
class DecodeSettings:
    """What to decode: topic filter, body, CRC check; ``path`` labels errors."""

    path: str = "<buffer>"
    topics: tuple[str, ...] = ()
    topic_pattern: str = ""
    include_body: bool = True
    check_crc: bool = True
    context: str = ""  # e.g. "partition 00000000000000000000 [0, 4096)", appended to errors


def _corrupt(settings: DecodeSettings, position: int, reason: str, **crc: int) -> Exception:
    if settings.context:
        reason = f"{reason} (reading {settings.context})"
    return CorruptRecordError(settings.path, position, reason, **crc)


# --- record starts ----------------------------------------------------------------------------


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
    if position < 0 or position + 36 > limit:
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


def _message_at(buf: object, base_offset: int, position: int, limit: int) -> int:
    """``position`` if a message record starts there, else ``limit`` (BLANK, zeros, end)."""
    return position if is_record_start(buf, base_offset, position, limit) else limit


# --- validation -------------------------------------------------------------------------------


def _explain(
    buf: object, base_offset: int, position: int, limit: int, settings: DecodeSettings
) -> Exception:
    """The precise error for a record the vectorised checks rejected at ``position``."""
    view = memoryview(buf)[:limit]  # type: ignore[arg-type]
    if limit - position < 8:
        return _corrupt(settings, position, f"record header cut by the readable end {limit}")
    size, magic = _HEADER8.unpack_from(view, position)
    if size == 0 and magic == 0:
        return _corrupt(
            settings,
            position,
            f"unwritten (zero) bytes inside the readable range (ends at {limit})",
        )
    try:
        outcome = decode_record(view, position, path=settings.path, check_crc=settings.check_crc)
    except CorruptRecordError as err:
        return _corrupt(
            settings,
            position,
            err.reason,
            **(
                {"stored_crc": err.stored_crc, "computed_crc": err.computed_crc}
                if err.stored_crc is not None and err.computed_crc is not None
                else {}
            ),
        )
    if isinstance(outcome, NeedMoreData):
        return _corrupt(
            settings, position, f"record of TOTALSIZE {size} extends past the readable end {limit}"
        )
    if isinstance(outcome, DecodedRecord):
        stored = outcome.record.physical_offset
        if stored != base_offset + position:
            return _corrupt(
                settings,
                position,
                f"PHYSICALOFFSET {stored} does not match the record's place "
                f"(expected {base_offset + position})",
            )
    return _corrupt(settings, position, f"not a message record here ({type(outcome).__name__})")


def _first_bad(bad: np.ndarray) -> int:
    return int(np.argmax(bad)) if bad.any() else -1


# --- decoding ---------------------------------------------------------------------------------


def decode_chunk(
    buf: object,
    base_offset: int,
    starts: np.ndarray,
    limit: int,
    settings: DecodeSettings,
) -> pa.RecordBatch:
    """Decode the message records at ``starts`` (absolute positions in ``buf``) to a batch.

    ``starts`` must come from ``hop`` (consecutive records, no BLANK). Every record is
    checked; those of unwanted topics are dropped before their body is touched.

    Raises
    ------
    CorruptRecordError
        The first record (lowest position) that is not valid, with the reason.
    """
    data = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    if len(starts) == 0:
        return _empty_batch()
    layouts = (data[starts + 39] >> 4) & 3
    if (layouts == layouts[0]).all():
        return _decode_layout(buf, data, base_offset, starts, int(layouts[0]), limit, settings)
    # Mixed IPv4/IPv6 hosts: decode each layout apart, then restore log order.
    parts = [
        _decode_layout(
            buf, data, base_offset, starts[layouts == layout], int(layout), limit, settings
        )
        for layout in np.unique(layouts)
    ]
    table = pa.Table.from_batches(parts, schema=ARROW_SCHEMA).combine_chunks()
    order = pc.sort_indices(table.column("physical_offset"))
    merged = table.take(order).combine_chunks().to_batches()
    return merged[0] if merged else _empty_batch()


def _empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)


def _decode_layout(
    buf: object,
    data: np.ndarray,
    base_offset: int,
    starts: np.ndarray,
    layout: int,
    limit: int,
    settings: DecodeSettings,
) -> pa.RecordBatch:
    dtype = _HEADER_DTYPES[layout]
    width = dtype.itemsize
    bh = 20 if layout & 1 else 8
    sh = 20 if layout & 2 else 8
    rows = gather_rows(data, starts, width)
    header = rows.view(dtype).reshape(-1)
    total = header["total_size"].astype(np.int64)
    magic = header["magic"].astype(np.uint32)
    body_size = header["body_size"].astype(np.int64)

    is_v2 = magic == MESSAGE_MAGIC_CODE_V2
    topic_len_size = np.where(is_v2, 2, 1)
    bad = ~((magic == MESSAGE_MAGIC_CODE_V1) | is_v2)
    bad |= header["physical_offset"].astype(np.int64) != base_offset + starts
    bad |= (body_size < 0) | (width + body_size + topic_len_size + 2 > total)
    topic_len_at = np.where(bad, starts, starts + width + body_size)
    topic_size = np.where(
        is_v2,
        (data[topic_len_at].astype(np.int8).astype(np.int64) << 8) | data[topic_len_at + 1],
        data[topic_len_at].astype(np.int8).astype(np.int64),
    )
    topic_at = topic_len_at + topic_len_size
    bad |= (topic_size < 0) | (topic_at + topic_size + 2 > starts + total)
    props_len_at = np.where(bad, starts, topic_at + topic_size)
    props_size = (data[props_len_at].astype(np.int8).astype(np.int64) << 8) | data[props_len_at + 1]
    props_at = props_len_at + 2
    bad |= props_at + props_size != starts + total
    first = _first_bad(bad)
    if first >= 0:
        raise _explain(buf, base_offset, int(starts[first]), limit, settings)

    buffer = pa.py_buffer(buf)  # type: ignore[arg-type]
    try:
        topic = slices_to_array(data, buffer, topic_at, topic_size, pa.string())
    except pa.ArrowInvalid:
        raise _first_error(buf, base_offset, starts, limit, settings) from None

    if settings.topics or settings.topic_pattern:
        if settings.topics:
            wanted = pc.is_in(topic, value_set=pa.array(settings.topics, pa.string()))
        else:
            wanted = pc.match_substring_regex(topic, f"^(?:{settings.topic_pattern})$")
        keep = wanted.to_numpy(zero_copy_only=False)
        if not keep.all():
            topic = topic.filter(wanted)
            starts, rows, header = starts[keep], rows[keep], header[keep]
            body_size, props_at, props_size = body_size[keep], props_at[keep], props_size[keep]

    body_at = starts + width
    if settings.check_crc:
        _check_crc(buf, starts, body_at, body_size, header["body_crc"], settings)
    body = (
        slices_to_array(data, buffer, body_at, body_size, pa.binary())
        if settings.include_body
        else pa.nulls(len(starts), pa.binary())
    )
    try:
        props_text = slices_to_array(data, buffer, props_at, props_size, pa.string())
    except pa.ArrowInvalid:
        raise _first_error(buf, base_offset, starts, limit, settings) from None
    _, offsets_buf, data_buf = props_text.buffers()
    props = parse_properties_column(
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8),
        data_buf if data_buf is not None else pa.py_buffer(b""),
        np.frombuffer(offsets_buf, dtype=np.int32)[: len(starts) + 1].astype(np.int64),
    )

    born_host = _hosts(rows[:, 48 : 48 + bh], settings, starts)
    store_host = _hosts(rows[:, 56 + bh : 56 + bh + sh], settings, starts)
    msg_id = hex_strings(np.concatenate([rows[:, 56 + bh : 56 + bh + sh], rows[:, 28:36]], axis=1))
    sys_flag = header["sys_flag"].astype(np.int32)
    columns = [
        topic,
        pa.array(header["queue_id"].astype(np.int32)),
        pa.array(header["queue_offset"].astype(np.int64)),
        pa.array(header["physical_offset"].astype(np.int64)),
        pa.array(header["total_size"].astype(np.int32)),
        body,
        props.tags,
        props.keys,
        props.properties,
        msg_id,
        props.uniq_key,
        pa.array(header["born_ts"].astype(np.int64) * 1000, _TS_TYPE),
        born_host,
        pa.array(header["store_ts"].astype(np.int64) * 1000, _TS_TYPE),
        store_host,
        pa.array(sys_flag),
        pa.array(header["flag"].astype(np.int32)),
        pa.array(header["reconsume_times"].astype(np.int32)),
        pa.array(header["prepared_offset"].astype(np.int64)),
        pa.array(header["body_crc"].astype(np.int32)),
        _TX_NAMES.take(pa.array((sys_flag & 0xC) >> 2)),
        props.delay_level,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _check_crc(
    buf: object,
    starts: np.ndarray,
    body_at: np.ndarray,
    body_size: np.ndarray,
    stored: np.ndarray,
    settings: DecodeSettings,
) -> None:
    view = memoryview(buf)  # type: ignore[arg-type]
    crc32 = zlib.crc32
    computed = np.fromiter(
        (
            crc32(view[start : start + size])
            for start, size in zip(body_at.tolist(), body_size.tolist(), strict=True)
        ),
        dtype=np.int64,
        count=len(body_at),
    )
    computed &= 0x7FFFFFFF
    bad = computed != stored.astype(np.int64)
    first = _first_bad(bad)
    if first >= 0:
        raise _corrupt(
            settings,
            int(starts[first]),
            "BODYCRC mismatch",
            stored_crc=int(stored[first]) & 0xFFFFFFFF,
            computed_crc=int(computed[first]),
        )


def _first_error(
    buf: object,
    base_offset: int,
    starts: Sequence[int] | np.ndarray,
    limit: int,
    settings: DecodeSettings,
) -> Exception:
    """Find and explain the first record the codec rejects (slow path, errors only)."""
    view = memoryview(buf)[:limit]  # type: ignore[arg-type]
    for position in np.asarray(starts).tolist():
        try:
            decode_record(view, position, path=settings.path, check_crc=False)
        except CorruptRecordError:
            return _explain(buf, base_offset, position, limit, settings)
    return _corrupt(settings, int(np.asarray(starts)[0]), "undecodable text in a record")


def _format_host(block: bytes) -> str:
    import ipaddress

    ip, port = block[:-4], int.from_bytes(block[-4:], "big", signed=True)
    address = ipaddress.ip_address(ip)
    if port < 0:
        raise ValueError(f"negative port {port}")
    return f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"


def _hosts(block: np.ndarray, settings: DecodeSettings, starts: np.ndarray) -> pa.Array:
    """``ip:port`` strings of a ``(n, 8|20)`` host block; formats each distinct host once."""
    count, width = block.shape
    if count == 0:
        return pa.array([], pa.string())
    keys = np.ascontiguousarray(block).view(f"V{width}").reshape(-1)
    unique, inverse = np.unique(keys, return_inverse=True)
    names = []
    for index, value in enumerate(unique):
        try:
            names.append(_format_host(value.tobytes()))
        except ValueError as err:
            row = int(np.flatnonzero(inverse == index)[0])
            raise _corrupt(settings, int(starts[row]), f"bad host address: {err}") from None
    return pa.array(names, pa.string()).take(pa.array(inverse.reshape(-1)))


# --- slices -----------------------------------------------------------------------------------


def read_slice(
    buf: object,
    file_size: int,
    piece: SegmentSlice,
    settings: DecodeSettings,
) -> Iterator[pa.RecordBatch]:
    """Decode the records ``piece`` owns from its segment's bytes ``buf``.

    Parameters
    ----------
    buf
        The segment file's bytes (an ``mmap``), ``file_size`` long.
    piece
        Which records (see ``offsets.SegmentSlice`` for the ownership rule).
    settings
        Filter, body, CRC, error labels.

    Yields
    ------
    pyarrow.RecordBatch
        Of ``ARROW_SCHEMA``, in physical-offset order, at most ``CHUNK_RECORDS_MAX`` rows.

    Raises
    ------
    CorruptRecordError
        A record inside the readable range is not valid, the file is shorter than the
        readable range, or the partition boundary is ambiguous (see the module docstring).
    """
    base = piece.base_offset
    limit = piece.limit_position
    if file_size < limit:
        raise _corrupt(
            settings,
            file_size,
            f"segment file is {file_size} bytes, shorter than the readable end {limit}",
        )
    if piece.start_exact:
        pos = piece.start_position
    else:
        pos = sync_forward(buf, base, piece.start_position, limit)
    stop = piece.end_position
    data = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    while pos < stop:
        starts, after = hop(buf, pos, stop, limit)
        found = np.frombuffer(starts, dtype=np.int64) if len(starts) else np.zeros(0, np.int64)
        # RocketMQ ignores a BLANK's TOTALSIZE: a BLANK ends the segment's data wherever the
        # hop met it.
        magics = gather_rows(data, found + 4, 4).view(">u4").reshape(-1)
        blanks = np.flatnonzero(magics == BLANK_MAGIC_CODE)
        if len(blanks):
            found = found[: blanks[0]]
        if len(found):
            yield decode_chunk(buf, base, found, limit, settings)
        if len(blanks):
            return
        chunk_full = len(starts) >= CHUNK_RECORDS_MAX or after - pos >= CHUNK_BYTES_MAX
        pos = after
        if after >= stop or chunk_full:
            continue
        if limit - after >= 8 and _HEADER8.unpack_from(buf, after)[1] == BLANK_MAGIC_CODE:  # type: ignore[arg-type]
            return
        raise _explain(buf, base, after, limit, settings)
    if not piece.end_exact and pos < limit:
        expected = sync_forward(buf, base, stop, limit)
        actual = _message_at(buf, base, pos, limit)
        if expected != actual:
            raise _corrupt(
                settings,
                stop,
                f"ambiguous record boundary: the record chain continues at {actual} but the "
                f"next record start found by its PHYSICALOFFSET is {expected}",
            )
