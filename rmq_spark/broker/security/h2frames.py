"""PURE: the HTTP/2 frames the front writes itself, and ``PlaintextRefusal``.

Owns the trailers-only answer (``trailers``: static and unindexed HPACK entries only, so the
client's table stays as grpc's encoder expects it), frame building (``h2_frame``, ``u32``) and
``PlaintextRefusal``, the answer to every call of plaintext HTTP/2 under
``tls_mode=enforcing``. Does not read grpc's frames (``h2watch.py``).
"""

from __future__ import annotations

import struct

__all__ = [
    "GRPC_RESOURCE_EXHAUSTED",
    "H2_PREFACE",
    "PlaintextRefusal",
    "h2_frame",
    "trailers",
    "u32",
]

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
GRPC_RESOURCE_EXHAUSTED = 8
_GRPC_UNAVAILABLE = 14
_HEADERS, _SETTINGS = 0x1, 0x4


def u32(value: int) -> bytes:
    return struct.pack(">I", value)


def h2_frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def _literal(name: bytes, value: bytes) -> bytes:
    # HPACK literal header field without indexing, new name; both shorter than 127 bytes.
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def trailers(status: int, message: str) -> bytes:
    """A trailers-only response's header block: static and unindexed entries only, so the
    client's HPACK table is left as grpc's encoder expects it."""
    return (
        b"\x88"  # :status 200 (HPACK static table entry 8)
        + _literal(b"content-type", b"application/grpc")
        + _literal(b"grpc-status", str(status).encode())
        + _literal(b"grpc-message", message.encode())
    )


class PlaintextRefusal:
    """Answers every call of a plaintext HTTP/2 client with a gRPC status saying why.

    A bare close or GOAWAY reaches the user as "Failed parsing HTTP/2" or a deadline; a
    trailers-only response (``grpc-status`` 14, ``grpc-message``) is shown as it is.
    """

    def __init__(self, reason: str) -> None:
        self._buffer = bytearray()
        self._preface_seen = False
        self._trailers = trailers(_GRPC_UNAVAILABLE, reason)

    def feed(self, data: bytes) -> bytes:
        """The client's bytes in, our answer out (settings, then one status per call)."""
        self._buffer += data
        out = bytearray()
        if not self._preface_seen:
            if len(self._buffer) < len(H2_PREFACE):
                return b""
            self._preface_seen = True
            del self._buffer[: len(H2_PREFACE)]
            out += h2_frame(_SETTINGS, 0, 0, b"")
        while len(self._buffer) >= 9:
            length = int.from_bytes(self._buffer[:3], "big")
            if len(self._buffer) < 9 + length:
                break
            kind, flags = self._buffer[3], self._buffer[4]
            stream = int.from_bytes(self._buffer[5:9], "big") & 0x7FFFFFFF
            del self._buffer[: 9 + length]
            if kind == _SETTINGS and not flags & 0x1:
                out += h2_frame(_SETTINGS, 0x1, 0, b"")  # ACK
            elif kind == _HEADERS:
                out += h2_frame(_HEADERS, 0x5, stream, self._trailers)  # END_STREAM|HEADERS
        return bytes(out)
