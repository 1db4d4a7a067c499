"""Columnar decoding: many CommitLog records at once, from a segment map into Arrow batches.

Owns checking every record's structure in numpy (magic, PHYSICALOFFSET == segment base +
position, the length formula, BODYCRC, the record CRC property) and building the
``schema.ARROW_SCHEMA`` columns without a Python object per row. ``read_slice`` applies it
to one ``offsets.SegmentSlice``, over the record starts ``record_starts.py`` finds. A
partition whose end was cut by byte count also checks that the record where its own chain
stops is the one ``sync_forward`` finds there (what the next partition starts from), so even
a crafted body cannot make a record read twice or skipped: the query fails instead.

Does not own which slices to read (``offsets.py``), files (``store/view.py``) or Spark.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.errors import CorruptRecordError
from rmq_spark.spark.arrow_views import gather_rows, pieces
from rmq_spark.spark.columnar_build import ValidRecords, build_batch, record_crc_rows
from rmq_spark.spark.offsets import SegmentSlice
from rmq_spark.spark.record_starts import (
    CHUNK_BYTES_MAX,
    CHUNK_RECORDS_MAX,
    hop,
    message_at,
    sync_forward,
)
from rmq_spark.spark.schema import ARROW_SCHEMA
from rmq_spark.store.codec import DecodedRecord, NeedMoreData, decode_record
from rmq_spark.store.layout import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
)
from rmq_spark.store.record_crc import RECORD_CRC_BYTES
from rmq_spark.store.record_layout import (
    BODY_START,
    HEADER_FIELDS,
    HOST_FLAGS_BYTE,
    HOST_FLAGS_SHIFT,
)

__all__ = ["DecodeSettings", "decode_chunk", "read_slice"]

_HEADER8 = struct.Struct(">iI")
_PIECES = 7  # pieces per record in _decode_layout


def _header_dtype(layout: int) -> np.dtype:
    """Fixed part of a record with host layout ``layout`` (bit 0 born IPv6, bit 1 store IPv6):
    ``record_layout.HEADER_FIELDS``' numeric fields (the host blocks are read as bytes)."""
    fields = HEADER_FIELDS[layout]
    names = [name for name, (_at, form) in fields.items() if not form.startswith("S")]
    return np.dtype(
        {
            "names": names,
            "formats": [fields[name][1] for name in names],
            "offsets": [fields[name][0] for name in names],
            "itemsize": BODY_START[layout],
        }
    )


_HEADER_DTYPES = tuple(_header_dtype(layout) for layout in range(4))


@dataclass(frozen=True, slots=True)
class DecodeSettings:
    """What to decode: output columns, topic filter, CRC check; ``path`` labels errors."""

    path: str = "<buffer>"
    topics: tuple[str, ...] = ()
    topic_pattern: str = ""
    schema: pa.Schema = ARROW_SCHEMA  # output columns: ARROW_SCHEMA or a subset of it
    include_body: bool = True  # False: a body column is all nulls (no copy, no CRC check)
    check_crc: bool = True  # verify BODYCRC of every body returned
    decompress_body: bool = True  # inflate compressed bodies (False: the stored bytes)
    context: str = ""  # e.g. "partition 00000000000000000000 [0, 4096)", appended to errors

    def _empty(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist([], schema=self.schema)


def _corrupt(settings: DecodeSettings, position: int, reason: str, **crc: int) -> Exception:
    if settings.context:
        reason = f"{reason} (reading {settings.context})"
    return CorruptRecordError(settings.path, position, reason, **crc)


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
        return settings._empty()
    layouts = (data[starts + HOST_FLAGS_BYTE] >> HOST_FLAGS_SHIFT) & 3
    if (layouts == layouts[0]).all():
        layout = int(layouts[0])
        return _decode_layout(buf, data, base_offset, starts, layout, limit, settings)[0]
    # Mixed IPv4/IPv6 hosts: decode each layout apart, then restore log order.
    parts, positions = [], []
    for layout in np.unique(layouts):
        part, kept = _decode_layout(
            buf, data, base_offset, starts[layouts == layout], int(layout), limit, settings
        )
        parts.append(part)
        positions.append(kept)
    table = pa.Table.from_batches(parts, schema=settings.schema).combine_chunks()
    order = np.argsort(np.concatenate(positions), kind="stable")
    merged = table.take(pa.array(order)).combine_chunks().to_batches()
    return merged[0] if merged else settings._empty()


def _decode_layout(
    buf: object,
    data: np.ndarray,
    base_offset: int,
    starts: np.ndarray,
    layout: int,
    limit: int,
    settings: DecodeSettings,
) -> tuple[pa.RecordBatch, np.ndarray]:
    """Check and decode records of one host layout: (batch, positions of the rows kept)."""
    dtype = _HEADER_DTYPES[layout]
    width = dtype.itemsize
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

    # The record CRC covers every header field: checked before the topic filter, so that a
    # damaged topic cannot drop a record silently. The property is not a message property.
    ends = starts + total
    has_crc, bad = record_crc_rows(buf, data, starts, ends, props_size, settings.check_crc)
    first = _first_bad(bad)
    if first >= 0:
        raise _explain(buf, base_offset, int(starts[first]), limit, settings)
    props_end = np.where(has_crc, ends - RECORD_CRC_BYTES, ends)

    # Every record cut into 7 pieces (header, body, topic length, topic, properties length,
    # properties, the record CRC property and any gap to the next record): body, topic and
    # properties are then Arrow takes.
    low = int(starts.min())
    bounds = np.stack(
        [starts, starts + width, topic_len_at, topic_at, props_len_at, props_at, props_end],
        axis=1,
    ).reshape(-1)
    region = pa.py_buffer(buf).slice(low, int(ends.max()) - low)  # type: ignore[arg-type]
    texts = pieces(region, bounds - low, pa.string())
    row_index = np.arange(len(starts), dtype=np.int64)
    topic = texts.take(pa.array(row_index * _PIECES + 3))
    try:
        topic.validate(full=True)
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
            body_size, row_index = body_size[keep], row_index[keep]
            has_crc = has_crc[keep]

    records = ValidRecords(
        buf=buf,
        starts=starts,
        header=header,
        rows=rows,
        layout=layout,
        topic=topic,
        body_size=body_size,
        texts=texts,
        piece_rows=row_index * _PIECES,
        # With the check on, a verified record CRC covers the body: BODYCRC is not rechecked.
        sealed=has_crc if settings.check_crc else None,
    )
    batch = build_batch(
        records,
        settings.schema,
        settings.include_body,
        settings.check_crc,
        lambda position, reason, crc: _corrupt(settings, position, reason, **crc),
        lambda: _first_error(buf, base_offset, starts, limit, settings),
        settings.decompress_body,
    )
    return batch, starts


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
        actual = message_at(buf, base, pos, limit)
        if expected != actual:
            raise _corrupt(
                settings,
                stop,
                f"ambiguous record boundary: the record chain continues at {actual} but the "
                f"next record start found by its PHYSICALOFFSET is {expected}",
            )
