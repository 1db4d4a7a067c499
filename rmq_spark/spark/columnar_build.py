"""Building the output columns of validated records (the second half of columnar decoding).

Owns turning the header fields, topics, bodies and properties of records that
``columnar.py`` has already found and checked into an Arrow record batch of the requested
schema: only the requested columns are built (a query that needs no body never copies
bodies, one that needs no property column never parses properties), BODYCRC is verified
for every body returned, the record CRC property (``docs/FORMAT.md`` 2.3) of every record
that carries one is found and verified (``record_crc_rows``), hosts are formatted once per
distinct host, message ids are hex encoded through a table. Does not find or validate records.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from rmq_spark.spark.arrow_views import hex_strings
from rmq_spark.spark.columnar_properties import PROPERTY_COLUMNS, parse_properties_column
from rmq_spark.spark.schema import TRANSACTION_TYPE_NAMES
from rmq_spark.store.compression import COMPRESSED_FLAG, BodyCompressionError, inflate_body
from rmq_spark.store.crc import crc32_slices
from rmq_spark.store.record_crc import RECORD_CRC_BYTES, RECORD_CRC_PLACEHOLDER
from rmq_spark.store.record_layout import HEADER_FIELDS, PHYSICAL_OFFSET_POSITION

__all__ = ["ValidRecords", "build_batch", "record_crc_rows"]


@functools.cache
def _transaction_names() -> pa.Array:
    # Built on first use: pa.array imports pandas (~170 ms) and the stream's planning
    # process imports this module without ever decoding a record.
    return pa.array(TRANSACTION_TYPE_NAMES, pa.string())


_CRC_KEY = np.frombuffer(RECORD_CRC_PLACEHOLDER[:9], dtype=np.uint8)  # b"__CRC32#\x01"
_CRC_POWERS = 10 ** np.arange(10, dtype=np.int64)  # the digits are least significant first


@dataclass(frozen=True)
class ValidRecords:
    """Records that passed every structural check, one entry per output row."""

    buf: object  # the segment bytes (mmap)
    starts: np.ndarray  # record positions in the segment
    header: np.ndarray  # structured fixed-part fields (columnar._HEADER_DTYPES)
    rows: np.ndarray  # the fixed part as (n, width) bytes
    layout: int  # the host kind: an index of record_layout.HEADER_FIELDS
    topic: pa.Array  # already decoded (and UTF-8 checked)
    body_size: np.ndarray
    texts: pa.Array  # string "pieces" over the records (see columnar._decode_layout)
    piece_rows: np.ndarray  # index of each output row's first piece in ``texts``
    sealed: np.ndarray | None = None  # rows whose record CRC was verified (covers the body)


Fail = Callable[[int, str, dict[str, int]], Exception]  # (position, reason, crc fields)
TextError = Callable[[], Exception]  # explains the first undecodable text


def build_batch(
    records: ValidRecords,
    schema: pa.Schema,
    include_body: bool,
    check_crc: bool,
    fail: Fail,
    text_error: TextError,
    decompress: bool = True,
) -> pa.RecordBatch:
    """The batch of ``schema`` (a subset of ``schema.ARROW_SCHEMA``'s columns) for ``records``.

    Raises
    ------
    CorruptRecordError (through ``fail`` / ``text_error``)
        A body whose BODYCRC does not match (if ``check_crc``), a compressed body that
        does not inflate (if ``decompress``), properties that are not UTF-8, a negative port
        in a host address.
    """
    r = records
    header = r.header
    count = len(r.starts)
    names = set(schema.names)
    width = r.rows.shape[1]
    fields = HEADER_FIELDS[r.layout]
    born_host = slice(fields["born_host"][0], fields["store_ts"][0])  # address and port
    store_host = slice(fields["store_host"][0], fields["reconsume_times"][0])
    physical = slice(PHYSICAL_OFFSET_POSITION, PHYSICAL_OFFSET_POSITION + 8)
    columns: dict[str, pa.Array] = {"topic": r.topic}

    def numeric(field: str, dtype: type) -> pa.Array:
        return pa.array(header[field].astype(dtype))

    if "body" in names and not include_body:
        columns["body"] = pa.nulls(count, pa.binary())
    elif "body" in names:
        body_at = r.starts + width
        if check_crc:
            unsealed = slice(None) if r.sealed is None else ~r.sealed
            _check_crc(
                r.buf,
                r.starts[unsealed],
                body_at[unsealed],
                r.body_size[unsealed],
                header["body_crc"][unsealed],
                fail,
            )
        columns["body"] = r.texts.view(pa.binary()).take(pa.array(r.piece_rows + 1))
        if decompress:
            columns["body"] = _inflated(columns["body"], header["sys_flag"], r.starts, fail)
    wanted_props = names & PROPERTY_COLUMNS
    if wanted_props:
        text = r.texts.take(pa.array(r.piece_rows + 5))
        try:
            text.validate(full=True)
        except pa.ArrowInvalid:
            raise text_error() from None
        _, offsets_buf, data_buf = text.buffers()
        parsed = parse_properties_column(
            np.frombuffer(data_buf, dtype=np.uint8)
            if data_buf is not None
            else np.zeros(0, np.uint8),
            np.frombuffer(offsets_buf, dtype=np.int32)[: count + 1].astype(np.int64),
            wanted=wanted_props,
            map_type=schema.field("properties").type if "properties" in names else None,
            keys_type=schema.field("keys").type if "keys" in names else None,
        )
        columns.update(parsed)
    if "msg_id" in names:
        columns["msg_id"] = hex_strings(
            np.concatenate([r.rows[:, store_host], r.rows[:, physical]], axis=1)
        )
    if "born_host" in names:
        columns["born_host"] = _hosts(r.rows[:, born_host], r.starts, fail)
    if "store_host" in names:
        columns["store_host"] = _hosts(r.rows[:, store_host], r.starts, fail)
    sys_flag = header["sys_flag"].astype(np.int32)
    simple: dict[str, Callable[[], pa.Array]] = {
        "queue_id": lambda: numeric("queue_id", np.int32),
        "queue_offset": lambda: numeric("queue_offset", np.int64),
        "physical_offset": lambda: numeric("physical_offset", np.int64),
        "total_size": lambda: numeric("total_size", np.int32),
        "born_timestamp": lambda: _timestamps(header["born_ts"], schema.field("born_timestamp")),
        "store_timestamp": lambda: _timestamps(header["store_ts"], schema.field("store_timestamp")),
        "sys_flag": lambda: pa.array(sys_flag),
        "flag": lambda: numeric("flag", np.int32),
        "reconsume_times": lambda: numeric("reconsume_times", np.int32),
        "prepared_transaction_offset": lambda: numeric("prepared_offset", np.int64),
        "body_crc": lambda: numeric("body_crc", np.int32),
        "transaction_type": lambda: _transaction_names().take(pa.array((sys_flag & 0xC) >> 2)),
    }
    arrays = []
    for field in schema:
        if field.name not in columns:
            columns[field.name] = simple[field.name]()
        arrays.append(columns[field.name])
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _timestamps(millis: np.ndarray, field: pa.Field) -> pa.Array:
    return pa.array(millis.astype(np.int64) * 1000, field.type)


def _check_crc(
    buf: object,
    starts: np.ndarray,
    body_at: np.ndarray,
    body_size: np.ndarray,
    stored: np.ndarray,
    fail: Fail,
) -> None:
    """Verify every body's BODYCRC (``docs/FORMAT.md`` 2); raise for the first record that fails.

    Each body gets its own CRC. A cheaper XOR fold of equal-length bodies (CRC-32 is affine)
    was tried and dropped: identical damage to two bodies (the same bit flipped at the same
    offset, or two identical bodies zeroed) cancels in the fold and would go unnoticed.
    """
    if len(starts):
        _check_each(buf, starts, body_at, body_size, stored, fail)


def _check_each(
    buf: object,
    starts: np.ndarray,
    body_at: np.ndarray,
    body_size: np.ndarray,
    stored: np.ndarray,
    fail: Fail,
) -> None:
    computed = crc32_slices(buf, body_at, body_at + body_size)
    computed &= 0x7FFFFFFF
    bad = computed != stored.astype(np.int64)
    if bad.any():
        first = int(np.argmax(bad))
        raise fail(
            int(starts[first]),
            "BODYCRC mismatch",
            {
                "stored_crc": int(stored[first]) & 0xFFFFFFFF,
                "computed_crc": int(computed[first]),
            },
        )


def record_crc_rows(
    buf: object,
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    props_size: np.ndarray,
    check: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Which records ``[starts, ends)`` carry the record CRC property, and which of them fail
    the check (if ``check``: a CRC mismatch, or a property damaged so that it no longer reads
    as one, one byte off its fixed bytes), as two boolean arrays. As ``codec.decode_record``."""
    count = len(ends)
    has = np.zeros(count, dtype=bool)
    bad = np.zeros(count, dtype=bool)
    # Candidates: the property starts with "_"; one byte off it, with "_" or a "C" at +4.
    tail_at = ends - RECORD_CRC_BYTES
    candidate = (props_size >= RECORD_CRC_BYTES) & (
        (data[tail_at] == 95) | ((data[tail_at + 4] == 67) if check else False)
    )
    rows = np.flatnonzero(candidate)
    if len(rows) == 0:
        return has, bad
    tails = data[tail_at[rows][:, None] + np.arange(RECORD_CRC_BYTES)]
    key_off = (tails[:, :9] != _CRC_KEY).sum(axis=1) + (tails[:, 19] != 2)
    digits = tails[:, 9:19].astype(np.int64) - 48
    digit_off = ((digits < 0) | (digits > 9)).sum(axis=1)
    sealed = (key_off == 0) & (digit_off == 0)
    has[rows] = sealed
    if not check:
        return has, bad
    bad[rows] = key_off + digit_off == 1
    found = rows[sealed]
    if len(found):
        computed = crc32_slices(buf, starts[found], tail_at[found])
        stored = (digits[sealed] * _CRC_POWERS).sum(axis=1)
        bad[found] |= (computed & 0x7FFFFFFF) != stored
    return has, bad


def _format_host(block: bytes) -> str:
    ip, port = block[:-4], int.from_bytes(block[-4:], "big", signed=True)
    address = ipaddress.ip_address(ip)
    if port < 0:
        raise ValueError(f"negative port {port}")
    return f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"


def _hosts(block: np.ndarray, starts: np.ndarray, fail: Fail) -> pa.Array:
    """``ip:port`` strings of a ``(n, 8|20)`` host block; formats each distinct host once."""
    count, width = block.shape
    if count == 0:
        return pa.array([], pa.string())
    if width == 8:
        keys = np.ascontiguousarray(block).view(np.uint64).reshape(-1)
    else:
        keys = np.ascontiguousarray(block).view(f"V{width}").reshape(-1)
    # Sorting beats numpy 2's hash-based unique here; hosts repeat a lot.
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    new = np.ones(count, dtype=bool)
    new[1:] = ordered[1:] != ordered[:-1]
    group = np.cumsum(new) - 1
    inverse = np.empty(count, dtype=np.int64)
    inverse[order] = group
    names = []
    for position in order[new]:
        try:
            names.append(_format_host(block[position].tobytes()))
        except ValueError as err:
            raise fail(int(starts[position]), f"bad host address: {err}", {}) from None
    return pa.array(names, pa.string()).take(pa.array(inverse))


def _inflated(bodies: pa.Array, sys_flags: np.ndarray, starts: np.ndarray, fail: Fail) -> pa.Array:
    """``bodies`` with the compressed ones inflated (a consumer's view; ``compression.py``).
    Compressed bodies are rare and large: a Python step per compressed row only."""
    rows = np.flatnonzero(sys_flags & COMPRESSED_FLAG)
    if not len(rows):
        return bodies
    values = bodies.to_pylist()
    for row in rows.tolist():
        try:
            values[row] = inflate_body(values[row], int(sys_flags[row]))
        except BodyCompressionError as err:
            raise fail(int(starts[row]), f"compressed body: {err}", {}) from None
    return pa.array(values, pa.binary())
