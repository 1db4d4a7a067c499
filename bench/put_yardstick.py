"""bench_put.py's yardstick and profile of the batch put path.

``Yardstick``: the fastest pure-Python encoder of the store's records we could write, kept
apart from the store's code so that "put_batch / yardstick" means something. It writes the
same bytes as a ``put_batch`` of template messages (one topic, one body length, a generated
UNIQ_KEY, record CRC property sealed, offsets and queue offsets assigned; checked against
``codec.encode_record`` when built) and nothing else: no validation, no results, no
idempotency window, no segment. Everything constant in a batch is packed as one piece (12
``Struct`` fields per record instead of 23) and each step is one ``map`` of a C function
over the batch.

``profile_put_batch``: the per-message cost of each step of the store's batch put path
(``packed.py``), measured on the same messages, and what is left for the lock, the segment
and the copy into its memory map.
"""

from __future__ import annotations

import gc
import shutil
import struct
import time
import zlib
from collections.abc import Callable, Sequence
from itertools import count, islice, repeat
from operator import and_
from pathlib import Path

from rmq_spark.store.codec import encode_record
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.packed import Written, encode_packed, packed_results, queue_offsets_of
from rmq_spark.store.put import PutRequest
from rmq_spark.store.put_state import IdempotencyWindow

__all__ = ["Yardstick", "profile_put_batch"]

_MASK = 0x7FFFFFFF
_MAGIC = 0xDAA320A7  # MESSAGE_MAGIC_CODE_V1
_HEX4 = tuple(b"%04X" % n for n in range(1 << 16))
_CONST52 = struct.Struct(">iq4siq4siiqi")  # SYSFLAG .. BODYLENGTH


class Yardstick:
    """Encodes batches of ``body_size``-byte messages of ``topic`` (see the module
    docstring); ``key_head``: the 28 hex digits of a UNIQ_KEY before its counter."""

    def __init__(self, topic: str, body_size: int, host: HostAddress, key_head: str) -> None:
        self.host = host
        self.body_size = body_size
        self.key_head = key_head.encode()
        props_size = len("UNIQ_KEY\x01") + 32 + 1 + 20
        self.mid = bytes((len(topic),)) + topic.encode() + struct.pack(">h", props_size)
        self.mid += b"UNIQ_KEY\x01"
        self.size = 88 + body_size + len(self.mid) + 32 + 1 + 20
        self.head8 = struct.pack(">iI", self.size, _MAGIC)
        self.packer = struct.Struct(f">8sii4sqq52s{body_size}s{len(self.mid)}s28s4s1s")
        self.counter = count()

    def encode(
        self, bodies: Sequence[bytes], queue_ids: Sequence[int], base: int, now: int,
        queue_offsets: dict[int, int],
    ) -> bytes:  # fmt: skip
        """The records of one batch starting at physical offset ``base``."""
        n = len(bodies)
        size = self.size
        ip = self.host.packed()
        port = self.host.port
        const52 = _CONST52.pack(0, now, ip, port, now, ip, port, 0, 0, self.body_size)
        counters = {q: count(queue_offsets.get(q, 0)) for q in set(queue_ids)}
        offsets = list(map(next, map(counters.__getitem__, queue_ids)))
        for queue_id, counter in counters.items():
            queue_offsets[queue_id] = next(counter)
        keys = map(_HEX4.__getitem__, map(and_, islice(self.counter, n), repeat(0xFFFF)))
        records = list(
            map(
                self.packer.pack, repeat(self.head8), map(and_, map(zlib.crc32, bodies),
                repeat(_MASK)), queue_ids, repeat(b"\0\0\0\0"), offsets,
                range(base, base + n * size, size), repeat(const52), bodies, repeat(self.mid),
                repeat(self.key_head), keys, repeat(b"\x02"),
            )
        )  # fmt: skip
        # The CRC digits of all records in one format, reversed in one slice, then cut.
        crcs = tuple(map(and_, map(zlib.crc32, records), repeat(_MASK)))
        digits = ((b"%010d" * n) % crcs)[::-1]
        pieces = [b"\x02"] * (4 * n)
        pieces[0::4] = records
        pieces[1::4] = [b"__CRC32#\x01"] * n
        pieces[2::4] = [digits[10 * i : 10 * i + 10] for i in range(n - 1, -1, -1)]
        return b"".join(pieces)

    def check(self) -> None:
        """Raise unless the records are ``codec.encode_record``'s (record CRC sealed)."""
        topic = self.mid[1 : 1 + self.mid[0]].decode()
        bodies = [bytes([65 + i]) * self.body_size for i in range(3)]
        start = next(self.counter)
        data = self.encode(bodies, [0, 1, 0], 1000, 1_700_000_000_123, {0: 5})
        for index, (body, queue_offset) in enumerate(zip(bodies, [5, 0, 6], strict=True)):
            key = f"{self.key_head.decode()}{(start + 1 + index) & 0xFFFF:04X}"
            record = MessageRecord(
                topic, body, f"UNIQ_KEY\x01{key}\x02", [0, 1, 0][index], 0, queue_offset,
                1000 + index * self.size, 0, 1_700_000_000_123, self.host, 1_700_000_000_123,
                self.host,
            )  # fmt: skip
            expected = encode_record(record, record_crc=True)
            if data[index * self.size : (index + 1) * self.size] != expected:
                raise AssertionError(f"yardstick record {index} differs from the codec's")


def _per_message(batches: list[list[PutRequest]], step: Callable[[int], object]) -> float:
    """ns per message of ``step(batch index)`` over all batches (best of 3)."""
    messages = sum(len(batch) for batch in batches)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for index in range(len(batches)):
            step(index)
        best = min(best, time.perf_counter() - start)
    return best / messages * 1e9


def profile_put_batch(
    open_store: Callable[[], MessageStore], root: Path, count_: int, batch_size: int
) -> list[tuple[str, float]]:
    """(step, ns per message) of ``put_batch`` of 100-byte template messages: each step of
    the packed path run alone on the same batches, then the whole put and the rest."""
    store = open_store()
    try:
        requests = [PutRequest("BenchTopic", b"x" * 100, queue_id=i & 3) for i in range(count_)]
        batches = [requests[i : i + batch_size] for i in range(0, count_, batch_size)]
        appender = store._appender  # noqa: SLF001 - bench introspection
        templates = appender._templates  # noqa: SLF001
        assert templates is not None
        columns = [templates.columns(batch) for batch in batches]
        assert None not in columns
        cols = [c for c in columns if c is not None]
        now = 1_700_000_000_000
        table: dict[tuple[str, int], int] = {}
        offsets = [list(range(0, len(c.sizes) * c.sizes[0], c.sizes[0])) for c in cols]
        queue = [queue_offsets_of(c, table)[0] for c in cols]
        uniq_keys = appender._uniq_keys  # noqa: SLF001
        keys = [uniq_keys.keys_at(now, len(c.sizes)) for c in cols]
        key_bytes = [list(map(str.encode, k)) for k in keys]
        host = appender._store_host  # noqa: SLF001
        prefix = appender.msg_id_prefix
        window = IdempotencyWindow(store.config.idempotency_window_messages)
        # Each window step adds keys never added before (another millisecond's head).
        fresh = [uniq_keys.keys_at(now + 1 + j, batch_size) for j in range(3 * len(cols))]
        calls = count()
        gc.collect()
        gc.freeze()
        steps = [
            ("check requests, build columns (BODYCRC)", lambda i: templates.columns(batches[i])),
            ("queue offsets", lambda i: queue_offsets_of(cols[i], table)),
            ("UNIQ_KEYs", lambda i: list(map(str.encode, uniq_keys.keys_at(now, 256)))),
            ("pack records", lambda i: encode_packed(
                cols[i], offsets[i], queue[i], key_bytes[i], now, host, False)),
            ("pack records + record CRC", lambda i: encode_packed(
                cols[i], offsets[i], queue[i], key_bytes[i], now, host, True)),
            ("idempotency window", lambda i: window.add_block(
                "BenchTopic", fresh[next(calls)], (offsets[i], cols[i].sizes, queue[i],
                cols[i].queue_ids), now)),
            ("results (PutResult, msg ids)", lambda i: packed_results(
                cols[i], Written(offsets[i], queue[i], keys[i], now), prefix)),
        ]  # fmt: skip
        measured = [(name, _per_message(batches, step)) for name, step in steps]
        gc.unfreeze()
    finally:
        store.close()
    shutil.rmtree(root, ignore_errors=True)
    store = open_store()
    try:
        gc.collect()
        gc.freeze()
        whole = _per_message(batches, lambda i: store.put_batch(batches[i]))
        gc.unfreeze()
    finally:
        store.close()
    parts = sum(ns for name, ns in measured if name != "pack records")
    measured.append(("put_batch (whole)", whole))
    measured.append(("rest: lock, segment, copy into the mmap, bookkeeping", whole - parts))
    return measured
