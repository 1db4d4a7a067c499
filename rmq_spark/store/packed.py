"""PURE: the packed put path's batch encoder: columns of IPv4/v1 records -> their bytes.

Owns ``PackedColumns`` (a batch the appender's packed writer takes, one list per record
field: built by ``put_plan.Templates`` from requests or from columns, and by
``raw.RawParts``), and the per-batch steps that run under the put lock: queue offsets,
the records packed (``codec.record_packer``) and sealed (``record_crc.record_crc_digit_runs``),
then, after it, the message ids and results. Does not own which requests may take this
path (``put_plan.py``, ``raw.py``), the lock, segments or the idempotency window
(``appender.py``, ``put_state.py``).

Why columns: a batch put of 100-byte bodies is bound by the interpreter, not by copying
bytes. Each step here is one ``map`` of a C function over whole columns (``Struct.pack``,
``crc32``, ``bytes.__mod__``, ``PutResult``), with no Python frame or loop iteration
per record; a uniform batch (one topic, TAGS and body length) repeats one value per column.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable, Sequence
from itertools import accumulate, count, repeat
from typing import NamedTuple

from rmq_spark.store.codec import RECORD_HEAD, RECORD_HOSTS, RecordPacker
from rmq_spark.store.layout import MESSAGE_MAGIC_CODE_V1
from rmq_spark.store.put import PutResult, PutStatus
from rmq_spark.store.record_crc import RECORD_CRC_BYTES, RECORD_CRC_KEY, record_crc_digit_runs

__all__ = [
    "PackedColumns",
    "Written",
    "encode_packed",
    "msg_ids",
    "packed_results",
    "physical_offsets_of",
    "queue_offsets_of",
    "without_crc_property",
]

_pack = struct.Struct.pack
_head = RECORD_HEAD.pack
_hosts = RECORD_HOSTS.pack
_MAGIC = MESSAGE_MAGIC_CODE_V1
_CRC_END = b"\x02"
_BIG_ENDIAN = sys.byteorder == "big"


class PackedColumns(NamedTuple):
    """One batch for the packed writer, one entry per record in every column.

    A record is ``packer`` over the pieces of ``codec.RecordPacker`` (``mid``: topic
    length, topic, properties length and the properties before the UNIQ_KEY; ``tail``: the
    rest of them, without the record CRC property), then, when the store seals records, the
    record CRC property (``sizes`` count it). ``born_timestamps`` ``None``: every record is
    born at the store timestamp; ``consumes`` ``None``: every record takes a queue offset;
    ``uniq_keys`` ``None``: each record's UNIQ_KEY is generated under the lock, between
    ``mid`` and ``tail``; else the given keys (``None`` entries: none) are inside ``mid``.
    ``uniform``: one size, born host, flag, SYSFLAG, RECONSUMETIMES and prepared offset for
    all (the pieces they make are packed once per batch).
    """

    topics: Sequence[str]
    queue_ids: Sequence[int]
    bodies: Sequence[bytes]
    born_timestamps: Sequence[int | None] | None
    born_ips: Sequence[bytes]
    born_ports: Sequence[int]
    flags: Sequence[int]
    sys_flags: Sequence[int]
    reconsume_times: Sequence[int]
    prepared_offsets: Sequence[int]
    consumes: Sequence[bool] | None
    uniq_keys: Sequence[str | None] | None
    mids: Sequence[bytes]
    tails: Sequence[bytes]
    packers: Sequence[RecordPacker]
    body_crcs: Sequence[int]
    body_sizes: Sequence[int]
    sizes: Sequence[int]
    total: int
    uniform: bool


class Written(NamedTuple):
    """Where the packed writer put a batch: each record's physical and queue offset and
    UNIQ_KEY, and the store timestamp they all carry."""

    physical_offsets: list[int]
    queue_offsets: list[int]
    uniq_keys: Sequence[str | None]
    now: int


def queue_offsets_of(
    columns: PackedColumns, table: dict[tuple[str, int], int]
) -> tuple[list[int], dict[tuple[str, int], int]]:
    """The queue offset of each record (0 for one that takes none) and the next offset of
    each queue the batch wrote: consecutive per (topic, queue id), from ``table``."""
    topics = columns.topics
    consumes = columns.consumes
    if consumes is None and topics.count(topics[0]) == len(topics):  # one topic: by queue id
        topic = topics[0]
        by_queue = {queue: count(table.get((topic, queue), 0)) for queue in set(columns.queue_ids)}
        offsets = list(map(next, map(by_queue.__getitem__, columns.queue_ids)))
        return offsets, {(topic, queue): next(counter) for queue, counter in by_queue.items()}
    keys = list(zip(topics, columns.queue_ids, strict=True))
    if consumes is None:
        counters = {key: count(table.get(key, 0)) for key in set(keys)}
        offsets = list(map(next, map(counters.__getitem__, keys)))
        return offsets, {key: next(counter) for key, counter in counters.items()}
    pending: dict[tuple[str, int], int] = {}
    offsets = []
    for key, consuming in zip(keys, consumes, strict=True):
        if consuming:
            offset = pending.get(key)
            if offset is None:
                offset = table.get(key, 0)
            pending[key] = offset + 1
            offsets.append(offset)
        else:
            offsets.append(0)
    return offsets, pending


def encode_packed(
    columns: PackedColumns,
    physical_offsets: Sequence[int],
    queue_offsets: Sequence[int],
    key_bytes: Sequence[bytes],
    now: int,
    store_host: tuple[bytes, int],
    seal: bool,
) -> bytes:
    """The batch's records, back to back: offsets, store timestamp ``now``, UNIQ_KEY bytes
    (empty where ``head`` holds the properties whole) and, with ``seal``, the record CRC."""
    n = len(physical_offsets)
    borns = columns.born_timestamps
    if borns is None:
        born_column: Iterable[int | None] = repeat(now, n)
    else:
        born_column = [now if born is None else born for born in borns]
    store_ip, store_port = store_host
    if columns.uniform:  # every record's head and hosts pieces are the same
        heads: Iterable[bytes] = repeat(_head(columns.sizes[0], _MAGIC), n)
        hosts: Iterable[bytes] = repeat(
            _hosts(
                columns.born_ips[0], columns.born_ports[0], now, store_ip, store_port,
                columns.reconsume_times[0], columns.prepared_offsets[0], columns.body_sizes[0],
            ),
            n,
        )  # fmt: skip
    else:
        heads = map(_head, columns.sizes, repeat(_MAGIC))
        hosts = map(
            _hosts, columns.born_ips, columns.born_ports, repeat(now), repeat(store_ip),
            repeat(store_port), columns.reconsume_times, columns.prepared_offsets,
            columns.body_sizes,
        )  # fmt: skip
    records = list(
        map(
            _pack, columns.packers, heads, columns.body_crcs, columns.queue_ids, columns.flags,
            queue_offsets, physical_offsets, columns.sys_flags, born_column, hosts,
            columns.bodies, columns.mids, key_bytes, columns.tails,
        )
    )  # fmt: skip
    if not seal:
        return b"".join(records)
    # record ‖ key ‖ digits ‖ \x02 for each record, laid out by slice assignment (no tuple
    # per record as zip would make).
    pieces: list[bytes] = [_CRC_END] * (4 * n)
    pieces[0::4] = records
    pieces[1::4] = [RECORD_CRC_KEY] * n
    pieces[2::4] = record_crc_digit_runs(records)
    return b"".join(pieces)


def physical_offsets_of(columns: PackedColumns, base: int) -> list[int]:
    """Where each record of the batch starts when the first one starts at ``base``."""
    offsets = list(accumulate(columns.sizes, initial=base))
    offsets.pop()
    return offsets


def msg_ids(prefix: str, offsets: Sequence[int]) -> list[str]:
    """The offset message id of each physical offset: ``prefix`` (the store host's hex)
    and the offset as 16 upper-case hex digits, for the whole batch in a few C calls."""
    raw = array("q", offsets)
    if not _BIG_ENDIAN:
        raw.byteswap()
    return list(map(prefix.__add__, raw.tobytes().hex(" ", 8).upper().split()))


def packed_results(columns: PackedColumns, written: Written, prefix: str) -> list[PutResult]:
    """The ``PUT_OK`` result of every record of a written batch."""
    offsets = written.physical_offsets
    n = len(offsets)
    return list(
        map(
            PutResult, repeat(PutStatus.PUT_OK, n), offsets, written.queue_offsets,
            msg_ids(prefix, offsets), columns.topics, columns.queue_ids,
            repeat(written.now, n), written.uniq_keys, columns.sizes,
        )
    )  # fmt: skip


def without_crc_property(props_data: bytes, seal: bool) -> bytes:
    """``props_data`` as a packed record's ``head``/``tail`` holds it: without the reserved
    record CRC property at its end when the store seals records (the writer appends it)."""
    return props_data[:-RECORD_CRC_BYTES] if seal else props_data
