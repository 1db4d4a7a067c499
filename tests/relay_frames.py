"""The native front's side of the relay, for tests that speak to ``RelayCalls`` directly."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from rmq_spark.broker.grpc import relay_wire as wire


def open_payload(
    method: str, peer: str = "", deadline_us: int = -1, metadata: Sequence[tuple[str, bytes]] = ()
) -> bytes:
    """An ``OPEN`` frame's payload, as ``native/front/relay.go`` builds it."""
    out = struct.pack(">H", len(method)) + method.encode()
    out += struct.pack(">H", len(peer)) + peer.encode()
    out += struct.pack(">qH", deadline_us, len(metadata))
    for key, value in metadata:
        out += struct.pack(">H", len(key)) + key.encode() + struct.pack(">I", len(value)) + value
    return out


def answers(data: bytes) -> dict[int, tuple[int, bytes]]:
    """The frames the broker sent, by call id: (kind, payload); the last one of each call."""
    found, at = {}, 0
    while len(data) - at >= 9:
        length, kind, call_id = wire.HEADER.unpack_from(data, at)
        found[call_id] = (kind, data[at + 9 : at + 4 + length])
        at += 4 + length
    return found
