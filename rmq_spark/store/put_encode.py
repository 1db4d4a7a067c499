"""PURE: the general put path's encoder of IPv4/v1 records, and the IPv4 host cache.

Owns ``encode_ipv4_v1`` (a whole record from its field values, with the codec's record packer:
the put path's general encoder for the common case, ``put.prepare``) and ``ipv4_of`` (the
packed address and port of a host, cached, which every put path asks). Records with an IPv6
host or a v2 topic go through ``codec.encode_record``.
"""

from __future__ import annotations

import struct

from rmq_spark.store.codec import RECORD_HEAD, RECORD_HOSTS, record_mid, record_packer, record_size
from rmq_spark.store.crc import crc32
from rmq_spark.store.layout import MAX_TOPIC_LENGTH_V1, MESSAGE_MAGIC_CODE_V1
from rmq_spark.store.message import LOCALHOST, HostAddress

__all__ = ["LOCALHOST_IPV4", "encode_ipv4_v1", "ipv4_of"]

_RECORD_HEAD = RECORD_HEAD.pack
_RECORD_HOSTS = RECORD_HOSTS.pack
_MAGIC_V1 = MESSAGE_MAGIC_CODE_V1
_V1_IPV4_FIXED = record_size(0, 0, 0)  # codec's length formula: + topic, body, properties
_topic_prefixes: dict[str, bytes] = {}
_ipv4_hosts: dict[int, tuple[HostAddress, tuple[bytes, int] | None]] = {}
LOCALHOST_IPV4 = (LOCALHOST.packed(), LOCALHOST.port)
"""``ipv4_of(LOCALHOST)``, the default born host."""
_LOCALHOST_IPV4 = LOCALHOST_IPV4


def ipv4_of(host: HostAddress) -> tuple[bytes, int] | None:
    """(packed address, port) of an IPv4 ``host``; ``None`` for IPv6 or a non-host (cached)."""
    # Keyed by id() (hashing a frozen dataclass is slow); the host itself is kept in the
    # entry so that a recycled id never matches another object.
    cached = _ipv4_hosts.get(id(host))
    if cached is not None and cached[0] is host:
        return cached[1]
    packed = host.packed() if isinstance(host, HostAddress) else b""
    entry = (packed, host.port) if len(packed) == 4 else None
    if len(_ipv4_hosts) > 4096:
        _ipv4_hosts.clear()
    _ipv4_hosts[id(host)] = (host, entry)
    return entry


def encode_ipv4_v1(
    topic: str,
    body: bytes | bytearray | memoryview,
    props_data: bytes,
    queue_id: int,
    flag: int,
    sys_flag: int,
    born_timestamp_ms: int,
    born_host: HostAddress,
    store_timestamp_ms: int,
    store_host: HostAddress,
    reconsume_times: int,
    prepared_transaction_offset: int,
) -> bytearray | None:
    """Encode a record with IPv4 hosts and a v1 topic (<= 127 ASCII characters), QUEUEOFFSET
    and PHYSICALOFFSET 0; ``None`` when the record needs the codec's general path.

    The same bytes as ``codec.encode_record`` (a property test checks it), without building
    a ``MessageRecord``: the codec's record packer, with the properties whole in ``mid``.
    """
    prefix = _topic_prefixes.get(topic)
    if prefix is None:
        if not topic.isascii() or not 0 < len(topic) <= MAX_TOPIC_LENGTH_V1:
            return None
        prefix = bytes((len(topic),)) + topic.encode("ascii")
        if len(_topic_prefixes) > 4096:
            _topic_prefixes.clear()
        _topic_prefixes[topic] = prefix
    born = _LOCALHOST_IPV4 if born_host is LOCALHOST else ipv4_of(born_host)
    store = ipv4_of(store_host)
    if born is None or store is None:
        return None
    body_size = len(body)
    props_size = len(props_data)
    try:
        record = record_packer(body_size, len(prefix) + 2 + props_size, 0, 0).pack(
            _RECORD_HEAD(_V1_IPV4_FIXED + body_size + len(prefix) - 1 + props_size, _MAGIC_V1),
            crc32(body) & 0x7FFFFFFF,
            queue_id,
            flag,
            0,
            0,
            sys_flag & ~0x30,
            born_timestamp_ms,
            _RECORD_HOSTS(
                born[0], born[1], store_timestamp_ms, store[0], store[1], reconsume_times,
                prepared_transaction_offset, body_size,
            ),
            body,
            record_mid(prefix, props_size, props_data),
            b"",
            b"",
        )  # fmt: skip
    except struct.error:
        return None  # the codec names the field that is out of range
    return bytearray(record)
