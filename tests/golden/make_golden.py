"""Write (or check) the golden CommitLog byte vectors in tests/golden/*.hex.

Usage::

    .venv/bin/python tests/golden/make_golden.py           # rewrite every *.hex file
    .venv/bin/python tests/golden/make_golden.py --check   # exit 1 if a file's bytes differ

``CASES`` holds each message in its *stored form* (IPv6 sysflag bits set, BODYCRC filled in),
so that ``decode(golden) == CASES[name]`` holds literally. The files are annotated one field
per line by ``annotate``, an independent walk over the spec 1.2 table (it does not use the
decoder). Bytes are what count: ``#`` starts a comment, whitespace is ignored, so a plain
hex dump (e.g. from the Java harness on the Apache RocketMQ jars) compares the same way.
Changing a golden file changes the format: update docs/FORMAT.md in the same commit.
"""

from __future__ import annotations

import struct
import sys
from dataclasses import replace
from pathlib import Path

from rmq_spark.store.codec import encode_blank, encode_record
from rmq_spark.store.layout import BLANK_MAGIC_CODE
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.properties import encode_properties, java_hashmap_order

__all__ = [
    "BLANK_CASES",
    "CASES",
    "CRC_CASES",
    "DESCRIPTIONS",
    "annotate",
    "golden_bytes",
    "read_hex",
]

GOLDEN_DIR = Path(__file__).resolve().parent

_PROPS = {
    "TAGS": "TagA",
    "KEYS": "key1 key2",
    "UNIQ_KEY": "C0A8006414A418B4AAC2A1B2C3D40001",
    "WAIT": "true",
    "CLUSTER": "DefaultCluster",
}
# Java HashMap(16) order of these keys, as a 4.9.x broker serializes them (spec 3.1).
_PROPS_JAVA_ORDER = {key: _PROPS[key] for key in java_hashmap_order(_PROPS)}

_V4_BORN = HostAddress("192.168.0.100", 53412)
_V4_STORE = HostAddress("192.168.0.1", 10911)
_V6_BORN = HostAddress("2001:db8::1", 40000)
_V6_STORE = HostAddress("2001:db8::2", 10911)

CASES: dict[str, MessageRecord] = {
    "v1_ipv4": MessageRecord(
        topic="TopicTest",
        body=b"Hello RocketMQ",
        properties=encode_properties(_PROPS_JAVA_ORDER, trailing_separator=True),
        queue_id=1,
        flag=0,
        queue_offset=42,
        physical_offset=1073743058,
        sys_flag=0,
        born_timestamp_ms=1700000000000,
        born_host=_V4_BORN,
        store_timestamp_ms=1700000000123,
        store_host=_V4_STORE,
        reconsume_times=0,
        prepared_transaction_offset=0,
        body_crc=1774740973,
    ),
    "props_no_trailing_separator": MessageRecord(
        topic="TopicTest",
        body=b"123456789",
        properties=encode_properties(_PROPS_JAVA_ORDER, trailing_separator=False),
        queue_id=0,
        queue_offset=7,
        physical_offset=4096,
        born_timestamp_ms=1700000000000,
        born_host=_V4_BORN,
        store_timestamp_ms=1700000000001,
        store_host=_V4_STORE,
        body_crc=1274296614,
    ),
    "v2_long_topic": MessageRecord(
        topic="%RETRY%" + "consumer_group_" * 9,  # 7 + 135 = 142 chars > 127: v2 magic
        body=b"retry me",
        properties=encode_properties(
            {"RETRY_TOPIC": "TopicTest", "ORIGIN_MESSAGE_ID": "C0A8000100002A9F00000000400004D2"},
            trailing_separator=False,
        ),
        queue_id=0,
        queue_offset=3,
        physical_offset=2147483648,
        sys_flag=0x8,  # TRANSACTION_COMMIT_TYPE
        born_timestamp_ms=1700000000000,
        born_host=_V4_BORN,
        store_timestamp_ms=1700000005000,
        store_host=_V4_STORE,
        reconsume_times=1,
        prepared_transaction_offset=1073741824,
        body_crc=42598261,
    ),
    "ipv6_hosts": MessageRecord(
        topic="TopicTest",
        body=b"over IPv6",
        properties="TAGS\x01v6\x02",
        queue_id=3,
        queue_offset=9,
        physical_offset=512,
        sys_flag=0x30,  # BORNHOST_V6_FLAG | STOREHOST_V6_FLAG
        born_timestamp_ms=1700000000000,
        born_host=_V6_BORN,
        store_timestamp_ms=1700000000999,
        store_host=_V6_STORE,
        reconsume_times=3,
        body_crc=1832276142,
    ),
    "ipv6_born_only": MessageRecord(
        topic="TopicTest",
        body=b"mixed",
        properties="",
        queue_id=2,
        queue_offset=1,
        physical_offset=640,
        sys_flag=0x10,  # BORNHOST_V6_FLAG only: STORETIMESTAMP moves to 68
        born_timestamp_ms=1700000000000,
        born_host=_V6_BORN,
        store_timestamp_ms=1700000000002,
        store_host=_V4_STORE,
        body_crc=1763311395,
    ),
    "empty_body": MessageRecord(
        topic="T",
        body=b"",
        properties="",
        queue_id=0,
        queue_offset=0,
        physical_offset=0,
        born_timestamp_ms=0,
        born_host=HostAddress("127.0.0.1", 0),
        store_timestamp_ms=0,
        store_host=HostAddress("127.0.0.1", 10911),
        body_crc=0,
    ),
    "unicode": MessageRecord(
        topic="主题_Topic",
        body="你好, RocketMQ 😀".encode(),
        properties=encode_properties({"TAGS": "标签", "KEYS": "键1 键2", "备注": "a\x01b"}),
        queue_id=5,
        queue_offset=11,
        physical_offset=1234,
        born_timestamp_ms=1700000000000,
        born_host=_V4_BORN,
        store_timestamp_ms=1700000000003,
        store_host=_V4_STORE,
        body_crc=440522718,
    ),
    "edge_values": MessageRecord(
        topic="E",
        body=b"\x00\xff",
        properties="",
        queue_id=2147483647,
        flag=-2147483648,
        queue_offset=9223372036854775807,
        physical_offset=9223372036854775807,
        sys_flag=0x1 | 0x2 | 0x300,  # compressed, multi-tags, compression type ZLIB
        born_timestamp_ms=-1,
        born_host=HostAddress("255.255.255.255", 65535),
        store_timestamp_ms=9223372036854775807,
        store_host=HostAddress("0.0.0.0", 2147483647),
        reconsume_times=-1,
        prepared_transaction_offset=-9223372036854775808,
        body_crc=1826356594,
    ),
}

# Written with the record CRC property (docs/FORMAT.md 2.3): encode_record(record_crc=True).
# Decoding leaves the property out of ``properties``, so ``decode(golden) == CRC_CASES[name]``.
CRC_CASES: dict[str, MessageRecord] = {
    "record_crc": replace(CASES["v1_ipv4"], queue_offset=43, physical_offset=1073743310),
    "record_crc_no_trailing_separator": replace(
        CASES["props_no_trailing_separator"], queue_offset=8, physical_offset=4300
    ),
}

BLANK_CASES: dict[str, int] = {"blank": 1234}  # name -> remaining_bytes

DESCRIPTIONS = {
    "v1_ipv4": "v1 magic, IPv4 hosts, 5 properties in Java HashMap order with trailing \\x02",
    "props_no_trailing_separator": "as v1_ipv4 but properties without trailing \\x02 (4.9.1-5.1.4)",
    "v2_long_topic": "v2 magic (142-char %RETRY% topic, 2-byte length), COMMIT tx type",
    "ipv6_hosts": "both hosts IPv6 (sysflag 0x30, 20-byte host fields)",
    "ipv6_born_only": "born host IPv6, store host IPv4 (sysflag 0x10)",
    "empty_body": "empty body (BODYCRC 0) and empty properties",
    "unicode": "UTF-8 topic, body and properties; a value containing \\x01",
    "edge_values": "int32/int64 extremes in every numeric field, sysflag 0x303",
    "blank": "BLANK end-of-file record, 1234 bytes left in the segment",
    "record_crc": "as v1_ipv4 with the 20-byte __CRC32# record CRC property at the end",
    "record_crc_no_trailing_separator": "record CRC after properties that had no trailing \\x02",
}


def golden_bytes(name: str) -> bytes:
    """What ``name``'s file should contain, from code."""
    if name in BLANK_CASES:
        return encode_blank(BLANK_CASES[name])
    if name in CRC_CASES:
        return encode_record(CRC_CASES[name], record_crc=True)
    return encode_record(CASES[name])


def read_hex(path: Path) -> bytes:
    """The bytes of a golden file: hex digits, whitespace ignored, ``#`` to end of line."""
    digits = "".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
    return bytes.fromhex("".join(digits.split()))


def annotate(data: bytes) -> list[tuple[bytes, str]]:
    """Split an encoded record into ``(field bytes, comment)`` per spec 1.2 (not the decoder)."""
    out: list[tuple[bytes, str]] = []
    pos = 0

    def take(size: int, label: str, fmt: str | None = None) -> bytes:
        nonlocal pos
        chunk = data[pos : pos + size]
        note = f"{pos:>4}  {label}"
        if fmt:
            note += f" = {struct.unpack('>' + fmt, chunk)[0]}"
        out.append((chunk, note))
        pos += size
        return chunk

    take(4, "TOTALSIZE", "i")
    magic = struct.unpack(">I", take(4, "MAGICCODE"))[0]
    if magic == BLANK_MAGIC_CODE:
        out[-1] = (out[-1][0], out[-1][1] + " (BLANK)")
        return out
    v2 = magic == 0xDAA320AB
    out[-1] = (out[-1][0], out[-1][1] + (" (v2)" if v2 else " (v1)"))
    take(4, "BODYCRC", "i")
    take(4, "QUEUEID", "i")
    take(4, "FLAG", "i")
    take(8, "QUEUEOFFSET", "q")
    take(8, "PHYSICALOFFSET", "q")
    sys_flag = struct.unpack(">i", take(4, "SYSFLAG", "i"))[0]
    take(8, "BORNTIMESTAMP", "q")
    take(16 if sys_flag & 0x10 else 4, "BORNHOST address")
    take(4, "BORNHOST port", "i")
    take(8, "STORETIMESTAMP", "q")
    take(16 if sys_flag & 0x20 else 4, "STOREHOSTADDRESS address")
    take(4, "STOREHOSTADDRESS port", "i")
    take(4, "RECONSUMETIMES", "i")
    take(8, "PREPAREDTRANSACTIONOFFSET", "q")
    body_size = struct.unpack(">i", take(4, "BODYLENGTH", "i"))[0]
    take(body_size, f"BODY ({body_size} bytes)")
    topic_size = struct.unpack(">h" if v2 else ">b", take(2 if v2 else 1, "TOPICLENGTH"))[0]
    out[-1] = (out[-1][0], out[-1][1] + f" = {topic_size}")
    take(topic_size, f"TOPIC {data[pos : pos + topic_size].decode('utf-8')!r}")
    props_size = struct.unpack(">h", take(2, "PROPERTIESLENGTH", "h"))[0]
    take(props_size, f"PROPERTIES ({props_size} bytes)")
    assert pos == len(data), (pos, len(data))
    return out


def render(name: str) -> str:
    """The annotated text of ``name``'s golden file."""
    lines = [
        f"# {name}: {DESCRIPTIONS[name]}",
        "# Written by tests/golden/make_golden.py; hex bytes, '#' starts a comment.",
        "# Offset (decimal) and field name follow each field.",
    ]
    for chunk, note in annotate(golden_bytes(name)):
        hexes = [chunk[i : i + 32].hex() for i in range(0, len(chunk), 32)] or [""]
        lines.append(f"{hexes[0]:<64}  # {note}")
        lines.extend(hexes[1:])
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    status = 0
    for name in [*CASES, *CRC_CASES, *BLANK_CASES]:
        path = GOLDEN_DIR / f"{name}.hex"
        if check:
            if not path.exists() or read_hex(path) != golden_bytes(name):
                print(f"DIFFERS: {path.name}")
                status = 1
        else:
            path.write_text(render(name))
            print(f"wrote {path.name} ({len(golden_bytes(name))} bytes)")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
