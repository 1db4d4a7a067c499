"""PURE: many whole records of a master's stream checked at once, and the columns their
dispatch needs (a slave's fast path, ``replica_log.py``).

Owns ``check_run``: from a buffer position, hop over TOTALSIZE while a message record of
IPv4 hosts starts there, check those records together in numpy (the length formula,
PHYSICALOFFSET naming the record's place, ports, BODYCRC or the record CRC property) with one
``crc32_slices`` call per run, and read the fields a ConsumeQueue/IndexFile dispatch and the
queue-offset table need as columns, with no decoded object per record.

The rules are ``record_decode.decode_record``'s; this module only proves that a record passes
them. A record it cannot vouch for (any check failed, a record CRC property that is not
exactly one, text that is not UTF-8, IPv6 hosts) ends the run there, and the caller hands that
record to ``decode_record``, which decides: its outcome or its error is the answer. So a
record the decoder refuses never passes here, and every error message is the decoder's.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from rmq_spark.store.crc import crc32_slices
from rmq_spark.store.layout import MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2
from rmq_spark.store.record_crc import RECORD_CRC_BYTES, RECORD_CRC_KEY
from rmq_spark.store.record_layout import (
    BODY_START,
    CACHE_MAX,
    HEADER8,
    HEADER_FIELDS,
    HOST_FLAGS_BYTE,
    HOST_FLAGS_SHIFT,
    MIN_RECORD_SIZE_BYTES,
)

__all__ = ["RecordColumns", "check_run"]

_WIDTH = BODY_START[0]  # an IPv4/IPv4 header up to BODYLENGTH: where the body starts
_DTYPE = np.dtype(
    {
        "names": list(HEADER_FIELDS[0]),
        "formats": [form for _, form in HEADER_FIELDS[0].values()],
        "offsets": [at for at, _ in HEADER_FIELDS[0].values()],
        "itemsize": _WIDTH,
    }
)
_MASK = 0x7FFFFFFF
_KEY = np.frombuffer(RECORD_CRC_KEY, dtype=np.uint8)
_POWERS = 10 ** np.arange(10, dtype=np.int64)  # digits least significant first
_CRC_SPAN = np.arange(RECORD_CRC_BYTES)
_MIN_RUN = 16  # fewer records (a live stream's transfer of a send or two): the decoder's
_topics: dict[bytes, str] = {}


@dataclass(slots=True)
class RecordColumns:
    """Valid records of a buffer, in log order: positions relative to the buffer."""

    positions: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    queue_ids: list[int] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    sys_flags: list[int] = field(default_factory=list)
    properties: list[str] = field(default_factory=list)
    store_timestamps: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.positions)


def _hop(buf: bytes | memoryview, position: int) -> array:
    """Starts of the consecutive message records (either magic, a possible size, whole in
    ``buf``) from ``position``."""
    starts = array("q")
    append = starts.append
    unpack = HEADER8.unpack_from
    size = len(buf)
    last = size - 8
    v1, v2, minimum = MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2, MIN_RECORD_SIZE_BYTES
    while position <= last:
        total, magic = unpack(buf, position)
        if (magic != v1 and magic != v2) or total < minimum or position + total > size:
            break
        append(position)
        position += total
    return starts


def check_run(buf: bytes | memoryview, position: int, base_offset: int, out: RecordColumns) -> int:
    """Append to ``out`` the records from ``position`` that pass (``buf[0]`` lies at physical
    offset ``base_offset``); returns where the run ended: the start of the first record not
    vouched for, of a BLANK, of a partial record, or ``len(buf)``. Fewer than ``_MIN_RUN``
    records ahead: none are taken (``position``), the decoder checks them one by one."""
    found = _hop(buf, position)
    if len(found) < _MIN_RUN:  # the decoder is cheaper than numpy's set-up for a few
        return position
    data = np.frombuffer(buf, dtype=np.uint8)
    starts = np.frombuffer(found, dtype=np.int64)
    layouts = (data[starts + HOST_FLAGS_BYTE] >> HOST_FLAGS_SHIFT) & 3
    other = np.flatnonzero(layouts)
    if len(other):  # IPv6 hosts: the decoder takes it from the first such record
        starts = starts[: other[0]]
        if not len(starts):
            return int(found[0])
    count = _good_prefix(buf, data, starts, base_offset, out)
    if count == len(found):
        last = int(found[-1])
        return last + HEADER8.unpack_from(buf, last)[0]
    return int(found[count])


def _good_prefix(
    buf: bytes, data: np.ndarray, starts: np.ndarray, base_offset: int, out: RecordColumns
) -> int:
    """Check the records at ``starts``; add the leading ones that pass to ``out``; how many."""
    rows = np.ndarray((len(data) - _WIDTH + 1,), f"V{_WIDTH}", data, strides=(1,))[starts]
    header = rows.view(_DTYPE)
    ends = starts + header["total_size"].astype(np.int64)
    body_size = header["body_size"].astype(np.int64)
    v2 = header["magic"] == MESSAGE_MAGIC_CODE_V2
    topic_len_at = starts + _WIDTH + body_size
    bad = (header["physical_offset"] != base_offset + starts) | (body_size < 0)
    bad |= (header["born_port"] < 0) | (header["store_port"] < 0)
    bad |= topic_len_at + np.where(v2, 4, 3) > ends
    topic_len_at = np.where(bad, starts, topic_len_at)
    signed = data.view(np.int8)
    topic_size = np.where(
        v2,
        (signed[topic_len_at].astype(np.int64) << 8) | data[topic_len_at + 1],
        signed[topic_len_at].astype(np.int64),
    )
    topic_at = topic_len_at + np.where(v2, 2, 1)
    props_len_at = topic_at + topic_size
    bad |= (topic_size < 0) | (props_len_at + 2 > ends)
    props_len_at = np.where(bad, starts, props_len_at)
    props_size = (signed[props_len_at].astype(np.int64) << 8) | data[props_len_at + 1]
    bad |= props_len_at + 2 + props_size != ends
    body = (np.where(bad, starts, starts + _WIDTH), np.where(bad, 0, body_size))
    sealed, unsure = _crc_checks(buf, data, starts, ends, props_size, body, header, bad)
    bad |= unsure
    count = int(np.argmax(bad)) if bad.any() else len(starts)
    if not count:
        return 0
    props_end = np.where(sealed, ends - RECORD_CRC_BYTES, ends)
    cut = slice(0, count)
    return _add(buf, header[cut], starts[cut], topic_at[cut], props_len_at[cut] + 2,
                props_end[cut], out)  # fmt: skip


def _crc_checks(
    buf: bytes,
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    props_size: np.ndarray,
    body: tuple[np.ndarray, np.ndarray],
    header: np.ndarray,
    bad: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(carries an exact record CRC property, fails or cannot be vouched for) per record:
    the record CRC when exactly present (``record_crc.record_crc_of``), else BODYCRC. A tail
    the decoder would look at (``_`` at its start or ``C`` at +4) that is not exactly the
    property is left to the decoder (absent, or damaged: its call)."""
    count = len(starts)
    candidate = (props_size >= RECORD_CRC_BYTES) & ~bad
    tail_at = np.where(candidate, ends - RECORD_CRC_BYTES, starts)
    candidate &= (data[tail_at] == 95) | (data[tail_at + 4] == 67)
    sealed = np.zeros(count, dtype=bool)
    unsure = np.zeros(count, dtype=bool)
    rows = np.flatnonzero(candidate)
    if len(rows):
        tails = data[tail_at[rows][:, None] + _CRC_SPAN]
        digits = tails[:, 9:19].astype(np.int64) - 48
        exact = (tails[:, :9] == _KEY).all(axis=1) & (tails[:, 19] == 2)
        exact &= ((digits >= 0) & (digits <= 9)).all(axis=1)
        sealed[rows] = exact
        unsure[rows[~exact]] = True
        found = rows[exact]
        if len(found):
            computed = _crcs(buf, starts[found], tail_at[found])
            unsure[found] |= computed != (digits[exact] * _POWERS).sum(axis=1)
    plain = np.flatnonzero(~sealed & ~unsure & ~bad)
    if len(plain):
        body_at, body_size = body[0][plain], body[1][plain]
        computed = _crcs(buf, body_at, body_at + body_size)
        unsure[plain] |= computed != header["body_crc"][plain].astype(np.int64)
    return sealed, unsure


def _crcs(buf: bytes, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Masked CRC-32 of each ``buf[start:end]``, no copy."""
    return crc32_slices(buf, starts, ends) & _MASK


def _add(
    buf: bytes,
    header: np.ndarray,
    starts: np.ndarray,
    topic_at: np.ndarray,
    props_at: np.ndarray,
    props_end: np.ndarray,
    out: RecordColumns,
) -> int:
    """Add the records whose topic and properties are UTF-8, up to the first that is not;
    how many were added."""
    topic_ends = (props_at - 2).tolist()
    topics, count = _texts(buf, topic_at.tolist(), topic_ends, _topics)
    props, count = _texts(buf, props_at[:count].tolist(), props_end[:count].tolist(), None)
    cut = slice(0, count)
    out.positions += starts[cut].tolist()
    out.sizes += header["total_size"][cut].tolist()
    out.topics += topics[cut]
    out.queue_ids += header["queue_id"][cut].tolist()
    out.queue_offsets += header["queue_offset"][cut].tolist()
    out.sys_flags += header["sys_flag"][cut].tolist()
    out.properties += props
    out.store_timestamps += header["store_ts"][cut].tolist()
    return count


def _texts(
    buf: bytes | memoryview, starts: list[int], ends: list[int], cache: dict[bytes, str] | None
) -> tuple[list[str], int]:
    """UTF-8 text of each span, up to the first that is not UTF-8; and how many. No span
    outlives its decoding (thousands of live views would wake the garbage collector)."""
    out: list[str] = []
    spans = zip(starts, ends, strict=True)
    try:
        if cache is None:
            out = [str(buf[a:b], "utf-8") for a, b in spans]
        else:
            append = out.append
            for a, b in spans:
                raw = buf[a:b]
                text = cache.get(raw)
                if text is None:
                    text = str(raw, "utf-8")
                    if len(cache) >= CACHE_MAX:
                        cache.clear()
                    cache[bytes(raw)] = text  # not a view: it would hold the whole buffer
                append(text)
    except UnicodeDecodeError:
        if cache is None:  # the comprehension kept nothing: again, one at a time
            for a, b in zip(starts, ends, strict=True):
                try:
                    out.append(str(buf[a:b], "utf-8"))
                except UnicodeDecodeError:
                    break
    return out, len(out)
