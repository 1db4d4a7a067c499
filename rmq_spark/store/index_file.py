"""PURE: RocketMQ's IndexFile layout (docs/FORMAT.md 11; RocketMQ ``IndexFile``,
``IndexHeader``, ``IndexService``).

Owns the bytes of one ``index/<yyyyMMddHHmmssSSS>`` file: the 40-byte header, the slot table
(``hash_slots`` int32 entry numbers, 0 = empty), the 20-byte entries (keyHash, phyOffset,
timeDiff in seconds, prevIndex; entry 0 never used), putting keys (``IndexBuffer.put``) and
looking them up (``IndexBuffer.select``), the file name, which records are indexed under
which keys (``record_keys``, ``indexed``) and the key hash for whole columns (``KeyHashes``,
the same value as ``hashing.index_key_hash``). Works on any writable buffer (a memory map);
does not own files, rolling or recovery (``index_files.py``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from itertools import groupby

from rmq_spark.store.hashing import java_string_hash
from rmq_spark.store.layout import TRANSACTION_MASK, TRANSACTION_ROLLBACK_TYPE
from rmq_spark.store.properties import KEY_SEPARATOR

__all__ = [
    "DEFAULT_HASH_SLOTS",
    "DEFAULT_INDEX_ENTRIES",
    "ENTRY_BYTES",
    "HEADER_BYTES",
    "IndexBuffer",
    "IndexHeader",
    "KeyHashes",
    "index_file_name",
    "index_file_size",
    "indexed",
    "record_keys",
]

HEADER_BYTES = 40
SLOT_BYTES = 4
ENTRY_BYTES = 20
DEFAULT_HASH_SLOTS = 5_000_000  # RocketMQ maxHashSlotNum
DEFAULT_INDEX_ENTRIES = 20_000_000  # RocketMQ maxIndexNum
MAX_QUERY_RESULTS = 64  # RocketMQ maxMsgsNumBatch
_HEADER = struct.Struct(">qqqqii")
_I32 = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")
_INT_MAX = (1 << 31) - 1
_MASK = 0xFFFFFFFF
_HEADS_MAX = 1 << 14
_TAILS_MAX = 1 << 17  # a UNIQ_KEY's tail is its 16-bit counter in hex: 65,536 of them


def index_file_size(hash_slots: int, entries: int) -> int:
    """Bytes of an index file: 40 + slots x 4 + entries x 20 (420,000,040 by default)."""
    return HEADER_BYTES + hash_slots * SLOT_BYTES + entries * ENTRY_BYTES


def index_file_name(now_ms: int) -> str:
    """``UtilAll.timeMillisToHumanString``: ``yyyyMMddHHmmssSSS`` in local time."""
    stamp = datetime.fromtimestamp(now_ms // 1000)  # noqa: DTZ006 - local, as Java's Calendar
    return f"{stamp:%Y%m%d%H%M%S}{now_ms % 1000:03d}"


def indexed(sys_flag: int) -> bool:
    """Whether a record is indexed: every transaction type but ROLLBACK (``buildIndex``)."""
    return sys_flag & TRANSACTION_MASK != TRANSACTION_ROLLBACK_TYPE


def record_keys(uniq_key: str | None, keys: str | None) -> list[str]:
    """The keys a record is indexed under, before ``topic#``: its UNIQ_KEY, then each
    non-empty token of KEYS split on a space (Java ``split`` drops trailing empty ones, which
    are skipped anyway)."""
    out = [uniq_key] if uniq_key is not None else []
    if keys:
        out.extend(token for token in keys.split(KEY_SEPARATOR) if token)
    return out


class KeyHashes:
    """``hashing.index_key_hash(prefix + key)`` of many keys, cheaply: Java's hash of
    ``head + tail`` is ``hash(head) * 31**len(tail) + hash(tail)`` (mod 2**32), and the keys
    a broker indexes share long heads (``topic#`` and a UNIQ_KEY's producer and millisecond
    part), so each key costs two cached lookups instead of a loop over its characters."""

    def __init__(self) -> None:
        self._heads: dict[str, int] = {}
        self._tails: dict[str, tuple[int, int]] = dict(_hex4_tails())

    def of(self, prefix: str, keys: Sequence[str]) -> list[int]:
        heads, tails = self._heads, self._tails
        if len(heads) > _HEADS_MAX:
            heads.clear()
        if len(tails) > _TAILS_MAX:
            tails.clear()
            tails.update(_hex4_tails())
        n = len(keys)
        if n >= 16:  # a batch's UNIQ_KEYs share everything but their last 4 characters
            heads_column = [key[:-4] for key in keys]
            if heads_column.count(heads_column[0]) == n:
                fast = self._same_head(prefix + heads_column[0], [key[-4:] for key in keys])
                if fast is not None:
                    return fast
            else:  # several batches' keys (a slave's replicated run): a head per batch
                fast = self._runs_of_heads(prefix, keys, heads_column)
                if fast is not None:
                    return fast
        out = []
        for key in keys:
            text = prefix + key
            head, tail = text[:-4], text[-4:]
            h = heads.get(head)
            if h is None:
                h = heads[head] = java_string_hash(head) & _MASK
            t = tails.get(tail)
            if t is None:
                units = len(tail.encode("utf-16-be", "surrogatepass")) // 2
                t = tails[tail] = (java_string_hash(tail) & _MASK, pow(31, units, 1 << 32))
            h = (h * t[1] + t[0]) & _MASK
            out.append(h if h < 0x80000000 else (0 if h == 0x80000000 else (1 << 32) - h))
        return out

    def _same_head(self, head: str, tails: list[str]) -> list[int] | None:
        """The hashes of ``head + tail`` for each tail, or ``None`` when a tail is not cached
        (then the general loop caches it)."""
        try:
            pairs = list(map(self._tails.__getitem__, tails))
        except KeyError:
            return None
        h = self._heads.get(head)
        if h is None:
            h = self._heads[head] = java_string_hash(head) & _MASK
        return list(map(_positive, [(h * m + t) & _MASK for t, m in pairs]))

    def _runs_of_heads(
        self, prefix: str, keys: Sequence[str], heads_column: list[str]
    ) -> list[int] | None:
        """``_same_head`` per run of keys sharing a head, when the runs are long (else, or
        when a tail is not cached, ``None``)."""
        runs = [(head, len(list(group))) for head, group in groupby(heads_column)]
        if len(runs) * 16 > len(keys):
            return None
        out: list[int] = []
        at = 0
        for head, count in runs:
            part = self._same_head(prefix + head, [key[-4:] for key in keys[at : at + count]])
            if part is None:
                return None
            out += part
            at += count
        return out


def _positive(h: int) -> int:
    """``abs`` of the signed int32 ``h`` (given unsigned), 0 for ``Integer.MIN_VALUE``."""
    return h if h < 0x80000000 else (0 if h == 0x80000000 else (1 << 32) - h)


@lru_cache(maxsize=1)
def _hex4_tails() -> dict[str, tuple[int, int]]:
    """The tail of every UNIQ_KEY: its counter as 4 upper-case hex digits, hashed once per
    process (~50 ms), so that no UNIQ_KEY misses the tail cache."""
    out = {}
    for value in range(1 << 16):
        text = f"{value:04X}"
        a, b, c, d = text.encode("ascii")
        out[text] = (((a * 31 + b) * 31 + c) * 31 + d, 923_521)  # 31**4
    return out


def _time_diffs(stamps: Sequence[int], begin: int) -> list[int]:
    """timeDiff of each store timestamp: whole seconds after ``begin``, clamped to
    [0, Integer.MAX_VALUE]; 0 when ``begin`` is not set. One value when all are equal."""
    n = len(stamps)
    if begin <= 0 or not n:
        return [0] * n
    if stamps.count(stamps[0]) == n:
        return [min(max((stamps[0] - begin) // 1000, 0), _INT_MAX)] * n
    return [min(max((stamp - begin) // 1000, 0), _INT_MAX) for stamp in stamps]


_PACK_ENTRIES = 256
_ENTRIES: dict[int, struct.Struct] = {}


def _pack_entries(flat: list[int], n: int) -> bytes:
    """``n`` entries (``flat``: 4 ints each) packed with ``Struct``s compiled once."""
    pieces = []
    for at in range(0, n, _PACK_ENTRIES):
        count = min(_PACK_ENTRIES, n - at)
        shape = _ENTRIES.get(count)
        if shape is None:
            shape = _ENTRIES[count] = struct.Struct(">" + "iqii" * count)
        pieces.append(shape.pack(*flat[4 * at : 4 * (at + count)]))
    return b"".join(pieces)


@dataclass(slots=True)
class IndexHeader:
    """The 40-byte header (``index_count``: the next free entry number, at least 1)."""

    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1

    @classmethod
    def unpack(cls, data: bytes | bytearray | memoryview) -> IndexHeader:
        header = cls(*_HEADER.unpack_from(data, 0))
        header.index_count = max(header.index_count, 1)  # a fresh file has 0 on disk
        return header

    def pack(self) -> bytes:
        return _HEADER.pack(
            self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
            self.end_phy_offset, self.hash_slot_count, self.index_count,
        )  # fmt: skip


class IndexBuffer:
    """One index file's bytes in ``buf`` (its header already read into ``header``)."""

    def __init__(self, buf: bytearray | memoryview, hash_slots: int, entries: int) -> None:
        self.buf = buf
        self.hash_slots = hash_slots
        self.entries = entries
        self.header = IndexHeader.unpack(buf)

    def preset(self, end_phy_offset: int, end_timestamp: int) -> None:
        """A new file after a full one starts where it ended (``IndexFile``'s constructor)."""
        header = self.header
        if end_phy_offset > 0:
            header.begin_phy_offset = header.end_phy_offset = end_phy_offset
        if end_timestamp > 0:
            header.begin_timestamp = header.end_timestamp = end_timestamp
        self.buf[:HEADER_BYTES] = header.pack()

    @property
    def full(self) -> bool:
        return self.header.index_count >= self.entries

    def put(
        self, hashes: Sequence[int], offsets: Sequence[int], stamps: Sequence[int], start: int
    ) -> int:
        """Put keys ``start..`` (keyHash, the record's physical offset and store timestamp)
        as ``IndexFile.putKey`` does one at a time; returns where it stopped (the file is
        full before ``len(hashes)``). Entries, then slots, then the header are written."""
        header, buf, slots = self.header, self.buf, self.hash_slots
        first = header.index_count
        stop = min(len(hashes), start + self.entries - first)
        if stop <= start:
            return start
        n = stop - start
        keys, where = hashes[start:stop], offsets[start:stop]
        when = stamps[start:stop]
        chained: dict[int, int] = {}
        prevs = [0] * n
        used = 0
        unpack, base = _I32.unpack_from, HEADER_BYTES
        for number, slot in enumerate([key_hash % slots for key_hash in keys], first):
            prev = chained.get(slot)
            if prev is None:
                prev = unpack(buf, base + slot * SLOT_BYTES)[0]
                if prev <= 0 or prev > first:
                    prev, used = 0, used + 1
            prevs[number - first] = prev
            chained[slot] = number
        begin = header.begin_timestamp
        diffs = _time_diffs(when, begin)
        if first <= 1:  # the first entry sets the begin, after its own timeDiff was taken
            header.begin_phy_offset, header.begin_timestamp = where[0], when[0]
            diffs[1:] = _time_diffs(when[1:], when[0])
        flat: list[int] = [0] * (4 * n)
        flat[0::4], flat[1::4], flat[2::4], flat[3::4] = keys, where, diffs, prevs
        at = HEADER_BYTES + slots * SLOT_BYTES + first * ENTRY_BYTES
        buf[at : at + n * ENTRY_BYTES] = _pack_entries(flat, n)
        pack_into = _I32.pack_into
        for slot, entry in chained.items():
            pack_into(buf, base + slot * SLOT_BYTES, entry)
        header.hash_slot_count += used
        header.index_count = first + n
        header.end_phy_offset, header.end_timestamp = where[-1], when[-1]
        buf[:HEADER_BYTES] = header.pack()
        return stop

    def entry(self, number: int) -> tuple[int, int, int, int]:
        """Entry ``number``: (keyHash, phyOffset, timeDiff, prevIndex)."""
        at = HEADER_BYTES + self.hash_slots * SLOT_BYTES + number * ENTRY_BYTES
        return _ENTRY.unpack_from(self.buf, at)  # type: ignore[return-value]

    def time_matched(self, begin: int, end: int) -> bool:
        """``IndexFile.isTimeMatched``."""
        low, high = self.header.begin_timestamp, self.header.end_timestamp
        return (begin < low and end > high) or low <= begin <= high or low <= end <= high

    def select(self, key_hash: int, max_num: int, begin: int, end: int) -> list[int]:
        """Physical offsets of entries with this keyHash stored within ``[begin, end]`` ms,
        newest first (``IndexFile.selectPhyOffset``: hash collisions included)."""
        header, buf = self.header, self.buf
        count = header.index_count
        number = _I32.unpack_from(buf, HEADER_BYTES + (key_hash % self.hash_slots) * 4)[0]
        found: list[int] = []
        if number <= 0 or number > count or count <= 1:
            return found
        base = HEADER_BYTES + self.hash_slots * SLOT_BYTES
        while len(found) < max_num:
            stored, offset, diff, prev = _ENTRY.unpack_from(buf, base + number * ENTRY_BYTES)
            if diff < 0:
                break
            when = header.begin_timestamp + diff * 1000
            if stored == key_hash and begin <= when <= end:
                found.append(offset)
            if prev <= 0 or prev > count or prev == number or when < begin:
                break
            number = prev
        return found
