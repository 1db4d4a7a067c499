"""PURE: message ids (FORMAT.md 5).

Owns the broker's *offset* message id (STOREHOST bytes + int64 physical offset, upper-case
hex) and its decoding, and ``UniqKeyGenerator`` for the client-style ``UNIQ_KEY``. Does not
own where ids are stored (the UNIQ_KEY property, see ``properties.py``) or indexing.
"""

from __future__ import annotations

import ipaddress
import itertools
import struct
from datetime import datetime, tzinfo

from rmq_spark.clock import Clock
from rmq_spark.errors import InvalidMessageError, InvalidMessageIdError
from rmq_spark.store.message import HostAddress

__all__ = [
    "UniqKeyGenerator",
    "decode_offset_msg_id",
    "month_start_ms",
    "offset_msg_id",
]

_PORT_OFFSET = struct.Struct(">iq")
_HEX = frozenset("0123456789abcdefABCDEF")


def offset_msg_id(store_host: HostAddress, physical_offset: int) -> str:
    """The broker-generated message id: STOREHOST ip ‖ int32 port ‖ int64 offset, in hex.

    32 hex characters for an IPv4 store host, 56 for IPv6 (FORMAT.md 5).

    Raises
    ------
    InvalidMessageError
        ``physical_offset`` negative or beyond int64.

    Examples
    --------
    >>> offset_msg_id(HostAddress("192.168.0.1", 10911), 1073743058)
    'C0A8000100002A9F00000000400004D2'
    """
    if not 0 <= physical_offset < (1 << 63):
        raise InvalidMessageError("physical_offset", f"{physical_offset} is outside int64 >= 0")
    data = store_host.packed() + _PORT_OFFSET.pack(store_host.port, physical_offset)
    return data.hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[HostAddress, int]:
    """``(store_host, physical_offset)`` of an offset message id; case-insensitive.

    Raises
    ------
    InvalidMessageIdError
        Not 32 or 56 characters, not hex, a negative port or a negative offset.
    """
    if not isinstance(msg_id, str) or len(msg_id) not in (32, 56):
        raise InvalidMessageIdError(str(msg_id), "an offset msg id has 32 or 56 hex characters")
    if not _HEX.issuperset(msg_id):
        raise InvalidMessageIdError(msg_id, "not hexadecimal")
    data = bytes.fromhex(msg_id)
    ip_size = 4 if len(data) == 16 else 16
    port, offset = _PORT_OFFSET.unpack_from(data, ip_size)
    if port < 0 or offset < 0:
        raise InvalidMessageIdError(msg_id, f"negative port {port} or offset {offset}")
    return HostAddress(str(ipaddress.ip_address(data[:ip_size])), port), offset


def month_start_ms(now_ms: int, tz: tzinfo | None = None) -> tuple[int, int]:
    """``(start, next_start)``: epoch ms of 00:00:00.000 on day 1 of this month and of the next.

    ``tz=None`` means the process's local time zone, as Java's ``Calendar.getInstance()``.
    """
    now = datetime.fromtimestamp(now_ms / 1000, tz).astimezone(tz)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if start.month == 12:
        following = start.replace(year=start.year + 1, month=1)
    else:
        following = start.replace(month=start.month + 1)
    if tz is None:
        # Re-resolve the UTC offset at each boundary (DST may differ from "now").
        start = start.replace(tzinfo=None).astimezone()
        following = following.replace(tzinfo=None).astimezone()
    return round(start.timestamp() * 1000), round(following.timestamp() * 1000)


class UniqKeyGenerator:
    """Makes client-style UNIQ_KEY ids (FORMAT.md 5), like ``MessageClientIDSetter``.

    Layout: ip (4/16) ‖ int16 pid ‖ int32 instance hash ‖ int32 ms since the start of the
    month ‖ int16 counter; upper-case hex, 32 characters for IPv4 (56 for IPv6).

    Thread safety: the counter is an ``itertools.count``, whose ``next`` is atomic under
    the GIL; the month boundary is recomputed idempotently, so concurrent callers are safe.

    Parameters
    ----------
    clock
        Source of ``now_ms()``.
    ip
        IPv4 or IPv6 address text of this producer/broker.
    pid
        Process id; only its low 16 bits are used.
    instance_hash
        Stands for Java's class-loader hash (fixed per JVM); default derives from clock
        and pid so that two generators started at different times differ.
    tz
        Time zone of the month start; ``None`` = local, as Java.
    """

    def __init__(
        self,
        clock: Clock,
        ip: str,
        pid: int,
        instance_hash: int | None = None,
        tz: tzinfo | None = None,
    ) -> None:
        address = ipaddress.ip_address(ip)
        if instance_hash is None:
            instance_hash = (clock.now_ms() * 31 + pid) & 0xFFFFFFFF
        self._prefix = address.packed + struct.pack(">HI", pid & 0xFFFF, instance_hash & 0xFFFFFFFF)
        self._clock = clock
        self._tz = tz
        self._counter = itertools.count()
        self._start_ms, self._next_start_ms = month_start_ms(clock.now_ms(), tz)

    def next_key(self) -> str:
        """A new UNIQ_KEY."""
        now = self._clock.now_ms()
        if now >= self._next_start_ms:
            self._start_ms, self._next_start_ms = month_start_ms(now, self._tz)
        diff = (now - self._start_ms) & 0xFFFFFFFF  # Java's (int) cast wraps after ~24.8 days
        if diff >= 0x80000000 and diff > 0x100000000 - 1_000_000:
            diff = 0  # Java forces small negative differences (clock skew) to 0
        count = next(self._counter) & 0xFFFF
        return (self._prefix + struct.pack(">IH", diff, count)).hex().upper()
