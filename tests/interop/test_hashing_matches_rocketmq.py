"""Our hashing, CRC, message id and properties modules against RocketMQ 5.3.3's own code:
String.hashCode, tagsString2tagsCode, IndexFile.indexKeyHashMethod, UtilAll.crc32,
MessageDecoder.createMessageId / decodeMessageId, messageProperties2String (through the
broker's HashMap(128)) and string2messageProperties."""

from __future__ import annotations

import random

import pytest
from rmq_java import b64

from rmq_spark.interop import Harness
from rmq_spark.store.codec import body_crc
from rmq_spark.store.hashing import index_key_hash, java_string_hash, tags_code
from rmq_spark.store.index_file import KeyHashes
from rmq_spark.store.message import HostAddress
from rmq_spark.store.msg_id import decode_offset_msg_id, offset_msg_id
from rmq_spark.store.properties import encode_properties, java_hashmap_order, parse_properties

pytestmark = pytest.mark.slow

FIXED_STRINGS = [
    "",
    "a",
    "TagA",
    "TagA || TagB",
    "TopicTest#KEY1",
    "polygenelubricants",  # hashCode == Integer.MIN_VALUE
    "GydZG_",
    "DESIGNING WORKHOUSES",
    "héllo",
    "中文标签",
    "\U0001f680 rocket",  # outside the BMP: two UTF-16 code units
    "\U0010ffff",
    "x" * 1000,
    "\x00\x01\x02",
]


def _random_strings(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyz#_-|%0123456789",
        "".join(chr(c) for c in range(0x20, 0x250)),
        "中文标签✓€\U0001f680\U0001f600\U00020000",
    ]
    return [
        "".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(0, 40)))
        for _ in range(count)
    ]


def test_string_hashes_match_java(harness: Harness) -> None:
    strings = FIXED_STRINGS + _random_strings(500, seed=7)
    answers = harness.encode([{"op": "string", "s": s} for s in strings])
    for s, answer in zip(strings, answers, strict=True):
        assert java_string_hash(s) == answer["hashCode"], s
        assert tags_code(s) == answer["tagsCode"], s
        assert index_key_hash(s) == answer["indexKeyHash"], s
        cut = len(s) // 3  # the IndexFile writer's column hash, with any prefix
        assert KeyHashes().of(s[:cut], [s[cut:]]) == [answer["indexKeyHash"]], s
        assert body_crc(s.encode("utf-8")) == answer["crc32Utf8"], s


def test_tags_code_of_absent_tags_is_zero_like_java(harness: Harness) -> None:
    (answer,) = harness.encode([{"op": "string", "s": ""}])
    assert tags_code(None) == tags_code("") == answer["tagsCode"] == 0


def test_body_crc_matches_utilall_crc32(harness: Harness) -> None:
    rng = random.Random(11)
    bodies = [b"", b"123456789", b"Hello RocketMQ", bytes(range(256))]
    bodies += [rng.randbytes(rng.randint(0, 3000)) for _ in range(200)]
    answers = harness.encode([{"op": "bytes", "b64": b64(b)} for b in bodies])
    for body, answer in zip(bodies, answers, strict=True):
        assert body_crc(body) == answer["crc32"]


def test_offset_msg_ids_match_create_message_id(harness: Harness) -> None:
    rng = random.Random(3)
    cases = [
        (HostAddress("192.168.0.1", 10911), 1073743058),
        (HostAddress("0.0.0.0", 0), 0),
        (HostAddress("255.255.255.255", 65535), (1 << 63) - 1),
        (HostAddress("::1", 10911), 4096),
        (HostAddress("2001:db8::ff00:42:8329", 1), 1 << 40),
    ]
    for _ in range(100):
        if rng.random() < 0.5:
            ip = ".".join(str(rng.randint(0, 255)) for _ in range(4))
        else:
            ip = ":".join(f"{rng.randint(0, 0xFFFF):x}" for _ in range(8))
        cases.append((HostAddress(ip, rng.randint(0, 65535)), rng.randint(0, 1 << 62)))
    answers = harness.encode(
        [{"op": "msgid", "host": str(host), "offset": offset} for host, offset in cases]
    )
    for (host, offset), answer in zip(cases, answers, strict=True):
        assert offset_msg_id(host, offset) == answer["msgId"]
        assert decode_offset_msg_id(answer["msgId"]) == (host, offset)
        assert HostAddress.parse(answer["decodedHost"]) == host
        assert answer["decodedOffset"] == offset


PROPERTY_MAPS = [
    {},
    {"TAGS": "TagA"},
    {"TAGS": "TagA", "KEYS": "k1 k2", "WAIT": "true", "CLUSTER": "DefaultCluster"},
    {
        "UNIQ_KEY": "7F00000100002A9F0000000000000001",
        "TAGS": "t",
        "KEYS": "a b c",
        "DELAY": "3",
        "REAL_TOPIC": "TopicTest",
        "REAL_QID": "1",
        "TRAN_MSG": "true",
        "PGROUP": "pg",
        "MIN_OFFSET": "0",
        "MAX_OFFSET": "10",
        "RETRY_TOPIC": "x",
        "ORIGIN_MESSAGE_ID": "y",
        "RECONSUME_TIME": "2",
        "MAX_RECONSUME_TIMES": "16",
        "TIMER_DELIVER_MS": "1700000000000",
        "__transactionId__": "tx",
        "CORRELATION_ID": "c",
        "MSG_TYPE": "NORMAL",
        "BORN_TIMESTAMP": "1",
        "__SHARDINGKEY": "s",
    },
    {f"user_key_{i}": f"value {i} ✓" for i in range(120)},  # forces HashMap resizes past 128
    {"ключ": "значение", "emoji\U0001f680": "v"},
]


def test_properties_strings_match_java_hashmap_serialisation(harness: Harness) -> None:
    answers = harness.encode([{"op": "props", "properties": m} for m in PROPERTY_MAPS])
    for properties, answer in zip(PROPERTY_MAPS, answers, strict=True):
        ordered = {k: properties[k] for k in java_hashmap_order(properties, 128)}
        assert encode_properties(ordered) == answer["string"], properties
        assert parse_properties(answer["string"]) == properties


PROPERTY_STRINGS = [
    "",
    "a\x01b",
    "a\x01b\x02",
    "a\x01b\x02c\x01d",
    "k\x01v\x01w\x02",  # the value keeps its \x01
    "\x01v\x02",  # empty key: dropped
    "k\x01\x02",  # empty value: dropped
    "ab\x02",  # no separator: dropped
    "\x02\x02\x02",
    "a\x01b\x02a\x01c\x02",  # later duplicate wins
    "x\x01y\x02\x02z\x01w",
    "a\x01",
    "\x01\x01\x01\x02",
    "TAGS\x01A\x02__CRC32#\x014166924721\x02",
]


def test_properties_parsing_matches_string2message_properties(harness: Harness) -> None:
    answers = harness.encode([{"op": "props", "string": s} for s in PROPERTY_STRINGS])
    for text, answer in zip(PROPERTY_STRINGS, answers, strict=True):
        # Ours leaves out the record CRC property (FORMAT.md 2.3); otherwise the same map.
        expected = {k: v for k, v in answer["properties"].items() if k != "__CRC32#"}
        assert parse_properties(text) == expected, repr(text)


def test_string_hash_counts_lone_surrogates_as_java_does(harness: Harness) -> None:
    # Not valid UTF-8, but a Java String may hold them (JSON carries them as \ud800 escapes).
    strings = ["\ud800", "a\udfffb", "\udbff\ud800"]
    answers = harness.encode([{"op": "string", "s": s} for s in strings])
    for s, answer in zip(strings, answers, strict=True):
        assert java_string_hash(s) == answer["hashCode"], repr(s)
