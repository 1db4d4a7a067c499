"""PURE: the message data types shared by the codec, the store, the broker and Spark.

``HostAddress`` is an ``ip:port`` pair (IPv4 or IPv6). ``MessageRecord`` is one CommitLog
message record with every stored field. No IO, no encoding logic (see ``codec.py``).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

__all__ = ["HostAddress", "MessageRecord"]


@dataclass(frozen=True, slots=True)
class HostAddress:
    """An IPv4 or IPv6 address and a port, as stored in BORNHOST / STOREHOSTADDRESS."""

    ip: str
    port: int

    def __post_init__(self) -> None:
        # Normalise the text form so that equal addresses compare equal. An IPv4-mapped IPv6
        # address (what a dual-stack socket reports for an IPv4 peer) becomes plain IPv4, as
        # Java's InetAddress does: RocketMQ then writes 4-byte hosts and no IPv6 sysflag bits.
        address = ipaddress.ip_address(self.ip)
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        object.__setattr__(self, "ip", str(address))
        if not 0 <= self.port <= 0x7FFFFFFF:
            raise ValueError(f"port out of range: {self.port}")

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.ip  # the normalised text: only an IPv6 address has a colon

    def packed(self) -> bytes:
        """The 4 or 16 address bytes, without the port (or an IPv6 zone)."""
        family = socket.AF_INET6 if ":" in self.ip else socket.AF_INET
        return socket.inet_pton(family, self.ip.partition("%")[0])

    def __str__(self) -> str:
        return f"[{self.ip}]:{self.port}" if self.is_ipv6 else f"{self.ip}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> HostAddress:
        """Parse ``1.2.3.4:10911`` or ``[::1]:10911``."""
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"not an ip:port address: {text!r}")
        return cls(host.strip("[]"), int(port))


LOCALHOST = HostAddress("127.0.0.1", 0)


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One CommitLog message record, every field as stored (``docs/FORMAT.md`` 2).

    ``properties`` is the stored properties *string*, kept verbatim so that a decoded record
    re-encodes to the same bytes; ``codec.parse_properties`` turns it into a dict.
    ``body_crc`` is filled in by the encoder (``None`` means "compute it").
    """

    topic: str
    body: bytes = b""
    properties: str = ""
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    sys_flag: int = 0
    born_timestamp_ms: int = 0
    born_host: HostAddress = LOCALHOST
    store_timestamp_ms: int = 0
    store_host: HostAddress = LOCALHOST
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int | None = None
