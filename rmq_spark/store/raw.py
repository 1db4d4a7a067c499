"""The raw-properties requests of the packed put path: copies put back verbatim.

Owns ``RawParts`` and its ``Packed`` records: checking, outside the put lock, that a request
carrying ``raw_properties`` can be written by the appender's packed writer (``appender.py``), and
building its parts: the codec's packer and the record's bytes around the header. This is how
the delay redelivery job (``rmq_spark/delay/``), the transaction commit and the broker's
redelivery requests put a copied message: its stored properties string kept verbatim, except
a stale record CRC property, which is replaced (the copy's offsets differ).

Same bytes and the same rules as the general path (``put.prepare``; tests check both against
``codec.encode_record`` and against each other): topic rules, body and properties size
limits, field ranges, no UNIQ_KEY assignment and no delay rewrite (docs/DELAY.md), queue offsets
only for non-transactional and COMMIT messages. A request this path does not take goes the
general way: a bytes-like body that is not ``bytes``, an IPv6 host, a v2 topic, a value of
the wrong type or out of range, properties that are not UTF-8 encodable or too large (the
general path says why), and ``idempotent`` requests (the general path dedupes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from rmq_spark.store.codec import HEADER_SIZE_IPV4, RecordPacker, record_mid, record_packer
from rmq_spark.store.crc import crc32
from rmq_spark.store.layout import (
    MAX_PROPERTIES_SIZE_BYTES,
    MAX_TOPIC_LENGTH_V1,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
)
from rmq_spark.store.message import LOCALHOST
from rmq_spark.store.packed import PackedColumns, without_crc_property
from rmq_spark.store.put import (
    MAX_RECORD_OVERHEAD_BYTES,
    PutRequest,
    check_topic,
    find_uniq_key,
)
from rmq_spark.store.put_encode import LOCALHOST_IPV4, ipv4_of
from rmq_spark.store.record_crc import with_record_crc, without_record_crc

__all__ = ["Packed", "RawParts"]

Packed = tuple[
    str, int, bytes, "int | None", tuple[bytes, int], int, int, int, int, bool, "str | None",
    bytes, RecordPacker, int, int,
]  # fmt: skip
"""One record for the appender's packed writer: (topic, queue_id, body, born_timestamp_ms,
born_host, flag, sys_flag, reconsume_times, prepared_transaction_offset, consumes a queue
offset, UNIQ_KEY, ``mid`` (the topic and the properties whole, without the record CRC
property), packer, BODYCRC, size (with the record CRC property)). ``RawParts`` builds them;
the writer takes their columns (``packed.PackedColumns``)."""

_I32_MIN = -(1 << 31)
_I32_MAX = (1 << 31) - 1
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_BORN_HOST_V6_BITS = 0x30  # BORNHOST_V6 | STOREHOSTADDRESS_V6: the hosts here are IPv4
_CONSUMING = (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
_TOPICS_MAX = 4096
_PACKERS_MAX = 512
_FIXED_SIZE = HEADER_SIZE_IPV4 + 2  # the header and the properties length
_ipv4 = ipv4_of
_LOCALHOST_IPV4 = LOCALHOST_IPV4


class RawParts:
    """Builds the ``Packed`` parts of raw-properties requests (see the module docstring)."""

    def __init__(self, max_body_bytes: int, record_crc: bool) -> None:
        self._max_body_bytes = max_body_bytes
        self._record_crc = record_crc
        # topic -> length byte + ASCII bytes, or None: the topic needs the general path.
        self._topics: dict[object, bytes | None] = {}
        # (body, topic prefix, properties) lengths -> the codec's packer of such a record.
        self._packers: dict[tuple[int, int], RecordPacker] = {}

    def _topic(self, topic: object) -> bytes | None:
        """The topic length byte and bytes of a legal v1 ``topic``, else ``None`` (cached)."""
        prefix = None
        if (
            type(topic) is str
            and not check_topic(topic)
            and topic.isascii()
            and 0 < len(topic) <= MAX_TOPIC_LENGTH_V1
        ):
            prefix = bytes((len(topic),)) + topic.encode("ascii")
        if len(self._topics) >= _TOPICS_MAX:
            self._topics.clear()
        self._topics[topic] = prefix
        return prefix

    def parts(self, request: PutRequest) -> Packed | None:
        """The packed writer's parts of ``request``, or ``None`` when the general path must
        take it (not a raw-properties request, or one it would refuse or that needs the
        codec's general encoder)."""
        raw = request.raw_properties
        topic = request.topic
        try:
            prefix = self._topics[topic]
        except KeyError:
            prefix = self._topic(topic)
        except TypeError:  # an unhashable topic: the general path refuses it
            return None
        body = request.body
        queue_id = request.queue_id
        born = request.born_timestamp_ms
        host = request.born_host
        born_host = _LOCALHOST_IPV4 if host is LOCALHOST else _ipv4(host)
        flag = request.flag
        sys_flag = request.sys_flag
        reconsume = request.reconsume_times
        prepared_offset = request.prepared_transaction_offset
        if (
            prefix is None
            or type(raw) is not str
            or request.idempotent
            or request.properties
            or request.tags
            or request.keys
            or born_host is None
            or type(body) is not bytes
            or len(body) > self._max_body_bytes
            or type(queue_id) is not int
            or not 0 <= queue_id <= _I32_MAX
            or (born is not None and (type(born) is not int or not _I64_MIN <= born <= _I64_MAX))
            or type(flag) is not int
            or not _I32_MIN <= flag <= _I32_MAX
            or type(sys_flag) is not int
            or not _I32_MIN <= sys_flag <= _I32_MAX
            or type(reconsume) is not int
            or not _I32_MIN <= reconsume <= _I32_MAX
            or type(prepared_offset) is not int
            or not _I64_MIN <= prepared_offset <= _I64_MAX
        ):
            return None
        try:
            props_data = raw.encode("utf-8")
        except UnicodeEncodeError:
            return None
        if b"__CRC32#" in props_data:  # a copy's stale record CRC
            props_data = without_record_crc(props_data)
        if self._record_crc:
            props_data = with_record_crc(props_data)
        body_size = len(body)
        props_size = len(props_data)
        size = _FIXED_SIZE + body_size + len(prefix) + props_size
        if (
            props_size > MAX_PROPERTIES_SIZE_BYTES
            or size > self._max_body_bytes + MAX_RECORD_OVERHEAD_BYTES
        ):
            return None
        mid = record_mid(prefix, props_size, without_crc_property(props_data, self._record_crc))
        shape = (body_size, len(mid))
        packer = self._packers.get(shape)
        if packer is None:
            packer = record_packer(body_size, len(mid), 0, 0)
            if len(self._packers) >= _PACKERS_MAX:
                self._packers.clear()
            self._packers[shape] = packer
        return (
            topic, queue_id, body, born, born_host, flag, sys_flag & ~_BORN_HOST_V6_BITS,
            reconsume, prepared_offset, (sys_flag & TRANSACTION_MASK) in _CONSUMING,
            find_uniq_key(raw), mid, packer, crc32(body) & 0x7FFFFFFF, size,
        )  # fmt: skip

    def columns(self, requests: Sequence[PutRequest]) -> PackedColumns | None:
        """The packed writer's columns of a batch of raw-properties requests, or ``None``
        when one of them needs the general path (the whole batch then takes it)."""
        parts = [self.parts(request) for request in requests]
        if None in parts:
            return None
        (
            topics, queue_ids, bodies, borns, born_hosts, flags, sys_flags, reconsume_times,
            prepared_offsets, consumes, uniq_keys, mids, packers, body_crcs, sizes,
        ) = zip(*cast("list[Packed]", parts), strict=True)  # fmt: skip
        return PackedColumns(
            topics, queue_ids, bodies, borns, [host[0] for host in born_hosts],
            [host[1] for host in born_hosts], flags, sys_flags, reconsume_times,
            prepared_offsets, consumes, uniq_keys, mids, [b""] * len(parts), packers,
            body_crcs, list(map(len, bodies)), sizes, sum(sizes), False,
        )  # fmt: skip
