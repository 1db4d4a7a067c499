"""PURE: the template path's parts (``appender.py``): plans, checks and UNIQ_KEY ids.

Owns ``Templates`` (which requests, or columns, take the template path, and their
``packed.PackedColumns``), ``RecordPlan`` (everything of a record that is the same for every
message of one (topic, TAGS) pair carrying only a generated UNIQ_KEY: the topic and
properties bytes around the key, the record's fixed size, and one packer per body length)
and ``UniqKeys`` (UNIQ_KEY ids with the layout of ``msg_id.UniqKeyGenerator``, with the hex
of everything but the counter cached per millisecond). Does not own validation rules
(``put.py``), locking or files (``appender.py``).

Why: a put of a 100-byte body spends most of its time in Python overhead, not in copying
bytes. Packing header, body, topic and properties with a single ``Struct.pack`` replaces a
header ``pack``, a ``join``, two patches and a copy; a batch does it with one ``map`` per
column (``packed.py``).
"""

from __future__ import annotations

import ipaddress
import itertools
import struct
from collections.abc import Sequence
from datetime import tzinfo
from itertools import islice, repeat
from operator import and_, attrgetter
from typing import cast

from rmq_spark.store.codec import (
    HEADER_SIZE_IPV4,
    RECORD_HEAD,
    RecordPacker,
    record_mid,
    record_packer,
)
from rmq_spark.store.crc import crc32
from rmq_spark.store.layout import (
    MAX_PROPERTIES_SIZE_BYTES,
    MAX_TOPIC_LENGTH_V1,
    MESSAGE_MAGIC_CODE_V1,
)
from rmq_spark.store.message import LOCALHOST, HostAddress
from rmq_spark.store.msg_id import month_start_ms
from rmq_spark.store.packed import PackedColumns
from rmq_spark.store.properties import TAGS, UNIQ_KEY
from rmq_spark.store.put import (
    PutRequest,
    check_topic,
    order_properties,
)
from rmq_spark.store.put_encode import LOCALHOST_IPV4, ipv4_of
from rmq_spark.store.record_crc import RECORD_CRC_BYTES

__all__ = ["RecordPlan", "Templates", "UniqKeys", "record_plan"]


_I32_MAX = (1 << 31) - 1
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_ZERO = 0
_PLANS_MAX = 4096
_ipv4 = ipv4_of
_LOCALHOST_IPV4 = LOCALHOST_IPV4

_PACKERS_MAX = 512
_HEX4: tuple[str, ...] = ()
_MASK = 0x7FFFFFFF
_TOPIC = attrgetter("topic")
_TAGS = attrgetter("tags")
_BODY = attrgetter("body")
_QUEUE_ID = attrgetter("queue_id")
_BORN = attrgetter("born_timestamp_ms")
_BORN_HOST = attrgetter("born_host")
_FIXED_SIZE = attrgetter("fixed_size")


def _hex4() -> tuple[str, ...]:
    """``f"{n:04X}"`` for every 16-bit ``n`` (built once; a lookup beats formatting)."""
    global _HEX4
    if not _HEX4:
        _HEX4 = tuple(f"{n:04X}" for n in range(1 << 16))
    return _HEX4


class RecordPlan:
    """The fixed parts of a v1 record of one topic and TAGS value whose only other property
    is a generated UNIQ_KEY of ``uniq_key_size`` characters (IPv4 hosts).

    The record is ``header ‖ body ‖ topic ‖ properties length ‖ before ‖ uniq key ‖ after``
    (``codec.record_packer``; ``mid`` is topic ‖ properties length ‖ before): ``topic`` is the topic
    length byte and the topic, ``before`` the properties up to the UNIQ_KEY value, ``after`` the
    rest of them (Java ``HashMap(128)`` order, trailing ``\\x02``); with ``seal``, the record CRC
    property follows (20 bytes that ``props_size`` and ``fixed_size`` count, written by
    ``record_crc.record_crc_tail``).
    """

    __slots__ = (
        "topic", "props_size", "before", "after", "mid", "fixed_size", "uniq_key_size", "shapes",
    )  # fmt: skip

    def __init__(
        self, topic: bytes, before: bytes, after: bytes, uniq_key_size: int, seal: bool
    ) -> None:
        self.topic = topic
        self.before = before
        self.after = after
        self.uniq_key_size = uniq_key_size
        sealed = RECORD_CRC_BYTES if seal else 0
        self.props_size = len(before) + uniq_key_size + len(after) + sealed
        self.mid = record_mid(topic, self.props_size, before)
        self.fixed_size = HEADER_SIZE_IPV4 + len(topic) + 2 + self.props_size
        self.shapes: dict[int, tuple[RecordPacker, bytes]] = {}

    def shape(self, body_size: int) -> tuple[RecordPacker, bytes]:
        """The codec's packer of the record for a body of ``body_size`` bytes, up to its
        record CRC property (``mid`` holds the topic and ``before``, then the UNIQ_KEY as
        ASCII bytes and ``after``), and the record's first piece (TOTALSIZE and MAGIC)."""
        shape = self.shapes.get(body_size)
        if shape is None:
            packer = record_packer(body_size, len(self.mid), self.uniq_key_size, len(self.after))
            shape = (packer, RECORD_HEAD.pack(self.fixed_size + body_size, MESSAGE_MAGIC_CODE_V1))
            if len(self.shapes) >= _PACKERS_MAX:
                self.shapes.clear()
            self.shapes[body_size] = shape
        return shape


def record_plan(
    topic: object, tags: object, uniq_key_size: int, record_crc: bool = True
) -> RecordPlan | None:
    """The plan of (``topic``, ``tags``), or ``None`` when such a message needs the general
    path: a topic that is not plain ASCII of 1..127 characters, TAGS that are not a
    non-empty string free of ``\\x02``, or properties that would be too large. The caller
    has checked the topic with ``put.check_topic``. ``record_crc``: the properties end with
    the record CRC property, sealed under the put lock (``RecordPlan``).
    """
    if type(topic) is not str or not topic.isascii() or not 0 < len(topic) <= MAX_TOPIC_LENGTH_V1:
        return None
    values = {UNIQ_KEY: ""}
    if tags is not None:
        if type(tags) is not str or not tags or "\x02" in tags:
            return None
        values[TAGS] = tags
    head: list[str] = []
    tail: list[str] = []
    for key in order_properties(values):
        if key == UNIQ_KEY:
            head.append(f"{UNIQ_KEY}\x01")
            tail.append("\x02")
        else:
            (tail if len(tail) else head).append(f"{key}\x01{values[key]}\x02")
    try:
        props_head = "".join(head).encode("utf-8")
        props_tail = "".join(tail).encode("utf-8")
    except UnicodeEncodeError:
        return None
    props_size = len(props_head) + uniq_key_size + len(props_tail)
    if props_size + (RECORD_CRC_BYTES if record_crc else 0) > MAX_PROPERTIES_SIZE_BYTES:
        return None
    topic_data = topic.encode("ascii")
    return RecordPlan(
        bytes((len(topic_data),)) + topic_data, props_head, props_tail, uniq_key_size, record_crc
    )


class Templates:
    """The template path's requests: no properties but TAGS (the UNIQ_KEY is generated under
    the put lock), IPv4 hosts, a v1 topic, a ``bytes`` body, default flags (what most
    producers send). One ``RecordPlan`` per (topic, TAGS), cached."""

    def __init__(self, max_body_bytes: int, key_size: int, record_crc: bool) -> None:
        self._max_body_bytes = max_body_bytes
        self._key_size = key_size
        self._record_crc = record_crc
        self._plans: dict[object, RecordPlan | None] = {}

    def check(self, request: PutRequest) -> tuple[RecordPlan, tuple[bytes, int]] | None:
        """The plan and born host of a template request, or ``None`` when it needs another
        path: no properties but TAGS (its UNIQ_KEY is generated), IPv4 hosts, a v1 topic, a
        ``bytes`` body within the limit, default flags."""
        topic = request.topic
        tags = request.tags
        try:
            plan = self._plans[(topic, tags) if tags else topic]
        except (KeyError, TypeError):
            plan = self._plan(topic, tags)
        body = request.body
        queue_id = request.queue_id
        born = request.born_timestamp_ms
        host = request.born_host
        born_host = _LOCALHOST_IPV4 if host is LOCALHOST else _ipv4(host)
        if (
            plan is None
            or born_host is None
            or request.properties
            or request.raw_properties is not None
            or request.keys
            or type(body) is not bytes
            or len(body) > self._max_body_bytes
            or type(queue_id) is not int
            or not 0 <= queue_id <= _I32_MAX
            or (born is not None and (type(born) is not int or not _I64_MIN <= born <= _I64_MAX))
            # ``is`` the interned int 0: anything else (another int, a bool, a float, None)
            # goes to the general path, which stores or rejects it.
            or request.flag is not _ZERO
            or request.sys_flag is not _ZERO
            or request.reconsume_times is not _ZERO
            or request.prepared_transaction_offset is not _ZERO
        ):
            return None
        return plan, born_host

    def columns(self, requests: Sequence[PutRequest]) -> PackedColumns | None:
        """The packed writer's columns of a batch of template requests, or ``None`` when
        one of them needs another path (see ``check``; the whole batch then takes it)."""
        zero = _ZERO
        local = LOCALHOST
        born_now = from_local = True
        for request in requests:
            if (
                request.flag is not zero
                or request.sys_flag is not zero
                or request.reconsume_times is not zero
                or request.prepared_transaction_offset is not zero
                or request.properties
                or request.raw_properties is not None
                or request.keys
            ):
                return None
            if request.born_timestamp_ms is not None:
                born_now = False
            if request.born_host is not local:
                from_local = False
        n = len(requests)
        return self.from_columns(
            list(map(_TOPIC, requests)),
            list(map(_QUEUE_ID, requests)),
            list(map(_BODY, requests)),
            list(map(_TAGS, requests)),
            [None] * n if born_now else list(map(_BORN, requests)),
            [local] * n if from_local else list(map(_BORN_HOST, requests)),
        )

    def from_columns(
        self,
        topics: Sequence[object],
        queue_ids: Sequence[object],
        bodies: Sequence[object],
        tags: Sequence[object],
        born_timestamps: Sequence[object],
        born_hosts: Sequence[object],
    ) -> PackedColumns | None:
        """The packed writer's columns of template messages given as columns (equal
        lengths; default flags, no properties but TAGS), or ``None`` when one of them needs
        another path: the same rules as ``check``, checked once per column, not per record."""
        n = len(topics)
        first = (topics[0], tags[0])
        try:
            if topics.count(first[0]) == n and tags.count(first[1]) == n:  # one (topic, TAGS)
                pairs = None
                plans = {first: self._plan_of(*first)}
            else:
                pairs = list(zip(topics, tags, strict=True))
                plans = {pair: self._plan_of(*pair) for pair in set(pairs)}
        except TypeError:  # an unhashable topic or TAGS value: the general path refuses it
            return None
        if None in plans.values() or set(map(type, bodies)) != {bytes}:
            return None
        if set(map(type, queue_ids)) != {int}:
            return None
        body_sizes = list(map(len, cast("Sequence[bytes]", bodies)))
        qids = cast("Sequence[int]", queue_ids)
        if max(body_sizes) > self._max_body_bytes or min(qids) < 0 or max(qids) > _I32_MAX:
            return None
        legal, borns = _born_column(born_timestamps, n)
        hosts = _host_columns(born_hosts, n)
        if not legal or hosts is None:
            return None
        if len(plans) == 1 and body_sizes.count(body_sizes[0]) == n:  # one value per column
            (plan,) = cast("list[RecordPlan]", list(plans.values()))
            packer, _ = plan.shape(body_sizes[0])
            packers, mids, tails = [packer] * n, [plan.mid] * n, [plan.after] * n
            sizes = [plan.fixed_size + body_sizes[0]] * n
            uniform = hosts[2]
        else:
            keys = pairs if pairs is not None else [first] * n
            per_record = cast("list[RecordPlan]", list(map(plans.__getitem__, keys)))
            shapes = zip(per_record, body_sizes, strict=True)
            packers = [plan.shape(size)[0] for plan, size in shapes]
            mids = [plan.mid for plan in per_record]
            tails = [plan.after for plan in per_record]
            sizes = list(map(int.__add__, map(_FIXED_SIZE, per_record), body_sizes))
            uniform = False
        data = cast("list[bytes]", bodies)
        zeros = [0] * n
        return PackedColumns(
            cast("list[str]", topics), qids, data, borns, hosts[0], hosts[1], zeros, zeros,
            zeros, zeros, None, None, mids, tails, packers,
            list(map(and_, map(crc32, data), repeat(_MASK))), body_sizes, sizes, sum(sizes),
            uniform,
        )  # fmt: skip

    def _plan_of(self, topic: object, tags: object) -> RecordPlan | None:
        try:
            return self._plans[(topic, tags) if tags else topic]
        except KeyError:
            return self._plan(topic, tags)

    def _plan(self, topic: object, tags: object) -> RecordPlan | None:
        """The template plan for (``topic``, ``tags``); ``None`` (remembered too) sends such
        messages down the general path."""
        plan = None
        if type(topic) is str and not check_topic(topic):
            plan = record_plan(topic, tags or None, self._key_size, self._record_crc)
        try:
            key = (topic, tags) if tags else topic
            hash(key)
        except TypeError:
            return None
        if len(self._plans) >= _PLANS_MAX:
            self._plans.clear()
        self._plans[key] = plan
        return plan


def _born_column(borns: Sequence[object], n: int) -> tuple[bool, Sequence[int | None] | None]:
    """(legal, column) of the born timestamps: the column is ``None`` when every record is
    born at the store timestamp; legal when each is ``None`` or an int64."""
    if borns.count(None) == n:
        return True, None
    if not set(map(type, borns)) <= {int, type(None)}:
        return False, None
    values = cast("list[int]", [born for born in borns if born is not None])
    if min(values) < _I64_MIN or max(values) > _I64_MAX:
        return False, None
    return True, cast("Sequence[int | None]", borns)


def _host_columns(hosts: Sequence[object], n: int) -> tuple[list[bytes], list[int], bool] | None:
    """The born host (packed IPv4 address, port) columns and whether they hold one host,
    or ``None`` if one is not IPv4."""
    if hosts.count(LOCALHOST) == n:
        return [_LOCALHOST_IPV4[0]] * n, [_LOCALHOST_IPV4[1]] * n, True
    distinct = {id(host): host for host in hosts}
    packed: dict[int, tuple[bytes, int]] = {}
    for key, host in distinct.items():
        entry = _ipv4(host) if isinstance(host, HostAddress) else None
        if entry is None:
            return None
        packed[key] = entry
    pairs = list(map(packed.__getitem__, map(id, hosts)))
    return [pair[0] for pair in pairs], [pair[1] for pair in pairs], len(set(pairs)) == 1


class UniqKeys:
    """UNIQ_KEY ids, the same as ``msg_id.UniqKeyGenerator`` makes (``docs/FORMAT.md`` 5), cheaper.

    Layout: ip (4/16) ‖ int16 pid ‖ int32 instance hash ‖ int32 ms since the start of the
    month ‖ int16 counter; upper-case hex. Everything but the counter changes at most once
    per millisecond, so its hex is cached and a key is one table lookup and one
    concatenation. The caller passes the time, so that the put path reads the clock once.

    Thread safety: the counter is an ``itertools.count`` (atomic under the GIL, and so is
    taking a batch's values from it with ``islice``, one C call) and the
    cached (millisecond, head) pair is replaced as one tuple, so concurrent callers never
    pair a head with the wrong millisecond.
    """

    __slots__ = ("_prefix", "_tz", "_counter", "_start_ms", "_next_start_ms", "_cached", "_hex4")

    def __init__(
        self, ip: str, pid: int, instance_hash: int, now_ms: int, tz: tzinfo | None = None
    ) -> None:
        address = ipaddress.ip_address(ip)
        self._prefix = (
            (address.packed + struct.pack(">HI", pid & 0xFFFF, instance_hash & 0xFFFFFFFF))
            .hex()
            .upper()
        )
        self._tz = tz
        self._counter = itertools.count()
        self._start_ms, self._next_start_ms = month_start_ms(now_ms, tz)
        self._cached: tuple[int, str] = (-1, "")
        self._hex4 = _hex4()

    @property
    def key_size(self) -> int:
        """Characters in a key: 32 for an IPv4 address, 56 for IPv6."""
        return len(self._prefix) + 12

    def _head(self, now_ms: int) -> str:
        if now_ms >= self._next_start_ms:
            self._start_ms, self._next_start_ms = month_start_ms(now_ms, self._tz)
        diff = (now_ms - self._start_ms) & 0xFFFFFFFF  # Java's (int) cast wraps after ~24.8 days
        if diff >= 0x80000000 and diff > 0x100000000 - 1_000_000:
            diff = 0  # Java forces small negative differences (clock skew) to 0
        head = f"{self._prefix}{diff:08X}"
        self._cached = (now_ms, head)
        return head

    def key_at(self, now_ms: int) -> str:
        """A new UNIQ_KEY stamped with ``now_ms``."""
        cached_ms, head = self._cached
        if cached_ms != now_ms:
            head = self._head(now_ms)
        return head + self._hex4[next(self._counter) & 0xFFFF]

    def keys_at(self, now_ms: int, count: int) -> list[str]:
        """``count`` new UNIQ_KEYs stamped with ``now_ms`` (``key_at`` of each, in C calls:
        ``islice`` takes the counter values without a Python frame between them)."""
        cached_ms, head = self._cached
        if cached_ms != now_ms:
            head = self._head(now_ms)
        counters = map(and_, islice(self._counter, count), repeat(0xFFFF))
        return list(map(head.__add__, map(self._hex4.__getitem__, counters)))
