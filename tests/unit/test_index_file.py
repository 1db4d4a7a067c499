"""The IndexFile layout (``store/index_file.py``) against RocketMQ's ``IndexFile``: hashing
(Java ``String.hashCode`` over UTF-16 code units, non-ASCII keys too), header, slots,
entries, chains, the first-entry quirk, a full file, and the lookup."""

from __future__ import annotations

import random
import struct

import pytest

from rmq_spark.store.hashing import index_key_hash
from rmq_spark.store.index_file import (
    ENTRY_BYTES,
    HEADER_BYTES,
    IndexBuffer,
    KeyHashes,
    index_file_name,
    index_file_size,
    indexed,
    record_keys,
)
from rmq_spark.store.layout import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)


def _java_hash(text: str) -> int:
    """Java's ``String.hashCode`` written out independently (UTF-16 code units)."""
    h = 0
    units = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _key_hash(text: str) -> int:
    h = abs(_java_hash(text))
    return 0 if h >= 1 << 31 else h


def test_rocketmq_hash_vectors_and_slots() -> None:
    assert KeyHashes().of("TopicTest#", ["KEY1"]) == [1656969516]
    assert 1656969516 % 5_000_000 == 1969516
    assert KeyHashes().of("", ["polygenelubricants"]) == [0]  # hashCode is Integer.MIN_VALUE
    assert _java_hash("é") == 233 and _java_hash("😀") == 0xD83D * 31 + 0xDE00


@pytest.mark.parametrize(
    "key",
    ["", "a", "abc", "abcd", "order-1", "Bestellung-ä-😀", "😀😀", "x😀", "日本語のキー", "é" * 40],
)
def test_key_hashes_are_javas_for_any_key(key: str) -> None:
    hashes = KeyHashes()
    for prefix in ("T#", "トピック#", ""):
        expected = _key_hash(prefix + key)
        assert hashes.of(prefix, [key]) == [expected] == [index_key_hash(prefix + key)]
        assert hashes.of(prefix, [key]) == [expected]  # from the caches


def test_key_hashes_of_random_keys_match_the_plain_hash() -> None:
    rng = random.Random(7)
    alphabet = "ab09-#é日😀 "
    keys = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(500)]
    assert KeyHashes().of("Topic#", keys) == [_key_hash("Topic#" + key) for key in keys]


def test_which_records_give_which_keys() -> None:
    assert record_keys("U1", "a b  c ") == ["U1", "a", "b", "c"]
    assert record_keys(None, "") == [] and record_keys(None, None) == []
    assert record_keys("U1", None) == ["U1"]
    assert indexed(0) and indexed(TRANSACTION_PREPARED_TYPE) and indexed(TRANSACTION_COMMIT_TYPE)
    assert not indexed(TRANSACTION_ROLLBACK_TYPE)


def test_file_name_and_size() -> None:
    assert len(index_file_name(1_700_000_000_123)) == 17
    assert index_file_name(1_700_000_000_123).endswith("123")
    assert index_file_size(5_000_000, 20_000_000) == 420_000_040


def _entry(buf: bytearray, slots: int, number: int) -> tuple[int, int, int, int]:
    return struct.unpack_from(">iqii", buf, HEADER_BYTES + slots * 4 + number * ENTRY_BYTES)


def test_put_writes_rocketmqs_header_slots_entries_and_chains() -> None:
    slots, entries = 4, 6
    buf = bytearray(index_file_size(slots, entries))
    index = IndexBuffer(buf, slots, entries)
    index.preset(500, 10_000)  # as after a full file that ended there
    hashes, offsets, stamps = (
        [5, 9, 6, 1, 2],
        [600, 600, 700, 800, 900],
        [11_500, 11_500, 14_999, 20_000, 21_000],
    )
    assert index.put(hashes, offsets, stamps, 0) == 5
    begin, end, begin_phy, end_phy, used, count = struct.unpack_from(">qqqqii", buf)
    # the first entry fixes the begin (its own timeDiff was taken against the preset one)
    assert (begin, end, begin_phy, end_phy, used, count) == (11_500, 21_000, 600, 900, 2, 6)
    assert _entry(buf, slots, 1) == (5, 600, 1, 0)  # (11500 - 10000) // 1000
    assert _entry(buf, slots, 2) == (9, 600, 0, 1)  # same slot as entry 1: chained
    assert _entry(buf, slots, 3) == (6, 700, 3, 0)
    assert _entry(buf, slots, 4) == (1, 800, 8, 2)  # slot 1 again
    slot_values = struct.unpack_from(">4i", buf, HEADER_BYTES)
    assert slot_values == (0, 4, 5, 0)  # slots 1 and 2: hashSlotCount 2
    assert index.full  # 6 entries, entry 0 unused: 5 keys
    assert index.put([3], [1000], [22_000], 0) == 0
    assert index.select(9, 10, 0, 1 << 62) == [600]
    assert index.select(5, 10, 0, 1 << 62) == [600]
    assert index.select(13, 10, 0, 1 << 62) == []  # slot 1, another hash
    assert index.select(9, 10, 12_000, 1 << 62) == []  # stored before begin
    reread = IndexBuffer(buf, slots, entries)
    assert reread.header == index.header


def test_put_stops_where_the_file_is_full_and_goes_on_from_there() -> None:
    slots, entries = 8, 3
    buf = bytearray(index_file_size(slots, entries))
    index = IndexBuffer(buf, slots, entries)
    assert IndexBuffer(buf, slots, entries).header.index_count == 1  # 0 on disk means 1
    assert index.put([1, 2, 3, 4], [10, 20, 30, 40], [1, 2, 3, 4], 1) == 3
    assert index.header.index_count == 3 and index.header.begin_phy_offset == 20


def test_time_match_is_rocketmqs() -> None:
    buf = bytearray(index_file_size(2, 4))
    index = IndexBuffer(buf, 2, 4)
    index.put([1, 2], [0, 1], [1000, 5000], 0)
    assert index.time_matched(0, 500_000) and index.time_matched(2000, 3000)
    assert not index.time_matched(6000, 9000)


def test_a_batch_of_keys_with_one_head_hashes_as_each_key_alone() -> None:
    head = "01637F38B9E0964AE20B1C371B0000"
    keys = [f"{head}{i & 0xFFFF:04X}" for i in range(0xFFF0, 0xFFF0 + 40)]  # tails wrap past FFFF
    keys[7] = head + "ä😀"  # a tail the cache has not seen: the general loop takes it
    for prefix in ("Topic#", "トピック#"):
        expected = [_key_hash(prefix + key) for key in keys]
        assert KeyHashes().of(prefix, keys) == expected
        assert KeyHashes().of(prefix, keys[8:]) == expected[8:]
