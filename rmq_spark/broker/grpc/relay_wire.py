"""The relay's frames: gRPC calls multiplexed between the native front and the broker.

One owner of the format ``native/front/relay.go`` speaks on the other side. A frame is a
big-endian u32 length (of what follows), a u8 kind, a u32 call id, then the payload:

* front -> broker: ``CALL`` (a call with one request: its ``OPEN``, its request and its
  ``HALF_CLOSE`` in one frame, what every call but a request stream is), ``OPEN`` (method,
  peer, deadline, metadata), ``MSG`` (a request's bytes), ``HALF_CLOSE`` (the client sent its
  last request), ``CANCEL`` (the client went away, or its deadline passed);
* broker -> front: ``MSG`` (a response's bytes), ``CLOSE`` (status code, details, trailing
  metadata), ``REPLY`` (a unary call's answer: its one response, then status OK).
"""

from __future__ import annotations

import struct

__all__ = [
    "CALL",
    "CANCEL",
    "CLOSE",
    "HALF_CLOSE",
    "HEADER",
    "MAX_FRAME_BYTES",
    "MSG",
    "OPEN",
    "Open",
    "REPLY",
    "RelayError",
    "close_frame",
    "frame",
    "parse_call",
    "parse_open",
]

OPEN, MSG, HALF_CLOSE, CANCEL, CLOSE, REPLY, CALL = 1, 2, 3, 4, 5, 6, 7
HEADER = struct.Struct(">IBI")
MAX_FRAME_BYTES = 1 << 30
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


class RelayError(Exception):
    """The front sent a frame that does not parse."""


class Open:
    """A call the front opened: ``deadline_s`` is the time left when it was sent (``None``:
    no deadline); ``metadata`` as grpc gives it (``-bin`` keys as bytes), parsed on first use
    (most calls never read it)."""

    __slots__ = ("method", "peer", "deadline_s", "_raw", "_at", "_metadata")

    def __init__(self, method: str, peer: str, deadline_s: float | None, raw: bytes, at: int):
        self.method = method
        self.peer = peer
        self.deadline_s = deadline_s
        self._raw, self._at = raw, at
        self._metadata: tuple[tuple[str, str | bytes], ...] | None = None

    @property
    def metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        metadata = self._metadata
        if metadata is None:
            metadata = self._metadata = _parse_metadata(self._raw, self._at)
        return metadata


def frame(kind: int, call_id: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(5 + len(payload), kind, call_id) + payload


def close_frame(call_id: int, code: int, details: str = "") -> bytes:
    """``CLOSE``: u32 status code, u16 details, u16 trailer count (none sent)."""
    text = details.encode("utf-8", "replace")[:65535]
    return frame(CLOSE, call_id, _U32.pack(code) + _U16.pack(len(text)) + text + _U16.pack(0))


# An OPEN's method and peer bytes -> their text: a connection's calls repeat both. Bounded:
# emptied when full.
_NAMED_CALLS: dict[bytes, tuple[str, str, int]] = {}
_NAMED_CALLS_MAX = 4096
_NAMED_CALL_KEPT_BYTES = 256


def parse_open(payload: bytes) -> Open:
    """``OPEN``: u16 method, u16 peer, i64 deadline in us (-1: none), then the metadata
    (``_parse_metadata``)."""
    try:
        peer_at = 2 + _U16.unpack_from(payload, 0)[0]
        named_end = peer_at + 2 + _U16.unpack_from(payload, peer_at)[0]
        named = _NAMED_CALLS.get(payload[:named_end])
        if named is None:
            named = _named_call(payload)
        method, peer, at = named
        (deadline_us,) = _I64.unpack_from(payload, at)
    except struct.error as err:
        raise RelayError(f"OPEN: too short: {err}") from err
    deadline_s = None if deadline_us < 0 else deadline_us / 1e6
    return Open(method, peer, deadline_s, payload, at + 8)


def parse_call(payload: bytes) -> tuple[Open, bytes]:
    """``CALL``: u32 request size, the request, then an ``OPEN``'s payload."""
    try:
        (size,) = _U32.unpack_from(payload, 0)
    except struct.error as err:
        raise RelayError(f"CALL: too short: {err}") from err
    if 4 + size > len(payload):
        raise RelayError("CALL: the request runs past the frame")
    return parse_open(payload[4 + size :]), payload[4 : 4 + size]


def _named_call(payload: bytes) -> tuple[str, str, int]:
    """An OPEN's method, peer and where its deadline starts, remembered (``_NAMED_CALLS``)."""
    method, at = _string16(payload, 0)
    peer, at = _string16(payload, at)
    if at <= _NAMED_CALL_KEPT_BYTES:  # a method name made up per call may be long: not kept
        if len(_NAMED_CALLS) >= _NAMED_CALLS_MAX:
            _NAMED_CALLS.clear()
        _NAMED_CALLS[payload[:at]] = (method, peer, at)
    return method, peer, at


def _parse_metadata(payload: bytes, at: int) -> tuple[tuple[str, str | bytes], ...]:
    """u16 count, then per value u16 key, u32 value. The front built it: a frame that does
    not parse is an error of the relay, raised as ``RelayError``."""
    try:
        (count,) = _U16.unpack_from(payload, at)
        at += 2
        metadata = []
        for _ in range(count):
            key, at = _string16(payload, at)
            (size,) = _U32.unpack_from(payload, at)
            raw = payload[at + 4 : at + 4 + size]
            if len(raw) != size:
                raise RelayError("OPEN: a metadata value runs past the frame")
            at += 4 + size
            metadata.append((key, raw if key.endswith("-bin") else raw.decode("utf-8", "replace")))
    except struct.error as err:
        raise RelayError(f"OPEN: metadata too short: {err}") from err
    return tuple(metadata)


def _string16(payload: bytes, at: int) -> tuple[str, int]:
    (size,) = _U16.unpack_from(payload, at)
    raw = payload[at + 2 : at + 2 + size]
    if len(raw) != size:
        raise RelayError("OPEN: a string runs past the frame")
    return raw.decode("utf-8", "replace"), at + 2 + size
