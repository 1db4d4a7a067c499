"""The record CRC property ``__CRC32#`` (docs/FORMAT.md 2.3; RocketMQ 5.2's
``enabledAppendPropCRC`` / ``forceVerifyPropCRC``): PURE.

Owns the 20 bytes that close a record's PROPERTIES when the property is present: reserving
them (``with_record_crc``), dropping a copied record's stale one (``without_record_crc``),
filling in the digits once the record's offsets and store timestamp are final
(``seal_record`` in place; ``record_crc_tail`` and ``record_crc_digit_runs`` for records packed
without it, under the put lock) and reading them back (``record_crc_of``). The rest of
the record layout is ``codec.py``'s, which calls this module when it encodes and decodes.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator, Sequence
from itertools import repeat
from operator import and_

from rmq_spark.errors import CorruptRecordError
from rmq_spark.store.crc import crc32

__all__ = [
    "RECORD_CRC_BYTES",
    "RECORD_CRC_DIGITS_AT",
    "RECORD_CRC_KEY",
    "RECORD_CRC_PLACEHOLDER",
    "record_crc_digit_runs",
    "record_crc_digits",
    "record_crc_of",
    "record_crc_tail",
    "seal_record",
    "with_record_crc",
    "without_record_crc",
]

_Buffer = bytes | bytearray | memoryview | mmap.mmap

RECORD_CRC_BYTES = 20
"""``__CRC32#`` ``\\x01`` 10 digits ``\\x02``: the last bytes of PROPERTIES when present."""
RECORD_CRC_KEY = b"__CRC32#\x01"
RECORD_CRC_PLACEHOLDER = RECORD_CRC_KEY + b"0000000000\x02"
"""The reserved property as encoded before ``seal_record`` fills in the digits."""
RECORD_CRC_DIGITS_AT = RECORD_CRC_BYTES - len(RECORD_CRC_KEY)  # 11: where the digits start
_DIGITS = frozenset(b"0123456789")
_SEAL_COPY_MAX = 16384
_MASK = 0x7FFFFFFF
# The digits least significant first, right-padded with "0", are the zero-padded number
# reversed: one format and one slice, both C calls ``map`` can chain.
_ZERO_PADDED = b"%010d".__mod__
_FORMATS: dict[int, tuple[bytes, list[slice]]] = {}  # batch size -> (format, cuts)
_PROPERTY = (RECORD_CRC_KEY + b"%s\x02").__mod__


def record_crc_digits(crc: int) -> bytes:
    """The 10 ASCII digits of ``crc``, least significant first, right-padded with ``0``
    (``MessageDecoder.createCrc32``).

    Examples
    --------
    >>> record_crc_digits(891568578)
    b'8758651980'
    """
    return _ZERO_PADDED(crc)[::-1]


def record_crc_tail(unsealed: bytes) -> bytes:
    """The sealed record CRC property (20 bytes) that ends the record whose bytes before it
    are ``unsealed`` (everything the CRC covers, offsets and store timestamp final)."""
    return _PROPERTY(_ZERO_PADDED(crc32(unsealed) & _MASK)[::-1])


def record_crc_digit_runs(unsealed: Sequence[bytes]) -> Iterator[bytes]:
    """The 10 digits of each record's CRC (``record_crc_digits``), for writers that join
    ``RECORD_CRC_KEY``, the digits and ``\\x02`` themselves: all of them formatted in one
    call, reversed in one slice (which also reverses their order), then cut."""
    crcs = tuple(map(and_, map(crc32, unsealed), repeat(_MASK)))
    count = len(crcs)
    formats = _FORMATS.get(count)
    if formats is None:
        if len(_FORMATS) >= 64:
            _FORMATS.clear()
        cuts = [slice(10 * i, 10 * i + 10) for i in range(count - 1, -1, -1)]
        formats = _FORMATS[count] = (b"%010d" * count, cuts)
    digits = (formats[0] % crcs)[::-1]
    return map(digits.__getitem__, formats[1])


def without_record_crc(props_data: bytes) -> bytes:
    """``props_data`` without any ``__CRC32#`` entry: a copied message's stale record CRC
    (its offsets change) must not be carried over."""
    if b"__CRC32#" not in props_data:
        return props_data
    kept = [
        entry
        for entry in props_data.split(b"\x02")
        if entry and not entry.startswith(RECORD_CRC_KEY[:-1])
    ]
    return b"".join(entry + b"\x02" for entry in kept)


def with_record_crc(props_data: bytes) -> bytes:
    """``props_data`` (without a ``__CRC32#`` entry) with the record CRC reserved at its end:
    a ``\\x02`` first if they do not end with one, then ``RECORD_CRC_PLACEHOLDER``."""
    if props_data and not props_data.endswith(b"\x02"):
        return props_data + b"\x02" + RECORD_CRC_PLACEHOLDER
    return props_data + RECORD_CRC_PLACEHOLDER


def seal_record(buf: bytearray | mmap.mmap, position: int, total: int) -> None:
    """Fill in the reserved record CRC of the record at ``position`` (``total`` bytes long, its
    offsets and store timestamp final): masked CRC-32 of bytes ``[0, total - 20)``."""
    end = position + total
    if total <= _SEAL_COPY_MAX:  # copying a small record is cheaper than a memoryview
        crc = crc32(buf[position : end - RECORD_CRC_BYTES]) & 0x7FFFFFFF
    else:
        with memoryview(buf) as view:
            crc = crc32(view[position : end - RECORD_CRC_BYTES]) & 0x7FFFFFFF
    buf[end - RECORD_CRC_DIGITS_AT : end - 1] = _ZERO_PADDED(crc)[::-1]


def record_crc_of(buf: _Buffer, position: int, end: int, path: str) -> tuple[int, int] | None:
    """The (stored, computed) record CRC of the record ``[position, end)`` if it carries the
    property, else ``None``. A property damaged so that it no longer reads as one (one byte
    off its fixed bytes) is reported, not taken for absent."""
    tail_at = end - RECORD_CRC_BYTES
    tail = bytes(buf[tail_at:end])
    if tail[:9] != RECORD_CRC_KEY or tail[19] != 2 or not tail[9:19].isdigit():
        # No property, or (rare: only then is the slow test run) one byte off one.
        if (tail[:4] == b"__CR" or tail[4:8] == b"C32#") and _one_byte_off(tail):
            raise CorruptRecordError(path, position, "damaged record CRC property")
        return None
    stored = int(tail[18:8:-1])  # least significant digit first
    return stored, crc32(buf[position:tail_at]) & 0x7FFFFFFF


def _one_byte_off(tail: bytes) -> bool:
    """Whether ``tail`` differs from a record CRC property in exactly one byte."""
    fixed = sum(a != b for a, b in zip(tail[:9] + tail[19:], RECORD_CRC_KEY + b"\x02", strict=True))
    return fixed + sum(digit not in _DIGITS for digit in tail[9:19]) == 1
