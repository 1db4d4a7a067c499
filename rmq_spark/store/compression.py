"""PURE: compressed message bodies, as RocketMQ's clients write them (docs/FORMAT.md 2.1).

A producer may compress a body (RocketMQ 4.x clients by default above 4 KiB, level 5, ZLIB);
the record then has ``COMPRESSED_FLAG`` (sys_flag bit 0) and the compression type in bits
8-10: 1 = LZ4 (frame format), 2 = ZSTD, 3 = ZLIB, **0 = ZLIB** (records of older clients). A
consumer gets the body inflated; this module owns inflating it, for the Spark source, the
reput tables and the CLI. ZLIB needs nothing; LZ4 and ZSTD need the ``lz4`` / ``zstandard``
packages and, without them, fail with a clear error (never return the compressed bytes as if
they were the body).
"""

from __future__ import annotations

import zlib
from typing import Any

__all__ = [
    "BodyCompressionError",
    "COMPRESSED_FLAG",
    "COMPRESSION_TYPE_MASK",
    "compression_name",
    "inflate_body",
    "is_compressed",
]

COMPRESSED_FLAG = 0x1
COMPRESSION_TYPE_MASK = 0x700
_NAMES = {0: "ZLIB", 1: "LZ4", 2: "ZSTD", 3: "ZLIB"}
_MAX_INFLATED_BYTES = 256 << 20  # a zip bomb in a record stops here


class BodyCompressionError(ValueError):
    """A compressed body that cannot be inflated (bad bytes, an unknown type, no codec)."""


def is_compressed(sys_flag: int) -> bool:
    return bool(sys_flag & COMPRESSED_FLAG)


def compression_name(sys_flag: int) -> str:
    """``ZLIB``, ``LZ4``, ``ZSTD`` or ``unknown(N)`` for a compressed record's sys_flag."""
    kind = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    return _NAMES.get(kind, f"unknown({kind})")


def inflate_body(body: bytes, sys_flag: int) -> bytes:
    """The body a consumer gets: inflated when ``sys_flag`` says it is compressed.

    Raises
    ------
    BodyCompressionError
        The bytes are not valid for the record's compression type, the type is unknown, or
        its codec package (``lz4``, ``zstandard``) is not installed.
    """
    if not sys_flag & COMPRESSED_FLAG:
        return body
    name = compression_name(sys_flag)
    try:
        if name == "ZLIB":
            inflater = zlib.decompressobj()
            out = inflater.decompress(body, _MAX_INFLATED_BYTES)
            if inflater.unconsumed_tail:
                raise BodyCompressionError(f"inflates past {_MAX_INFLATED_BYTES} bytes")
            if not inflater.eof:
                raise BodyCompressionError("truncated ZLIB stream")
            return out
        if name == "LZ4":
            return bytes(_module("lz4.frame", "lz4").decompress(body))
        if name == "ZSTD":
            codec = _module("zstandard", "zstandard")
            return bytes(
                codec.ZstdDecompressor().decompress(body, max_output_size=_MAX_INFLATED_BYTES)
            )
    except BodyCompressionError:
        raise
    except Exception as err:  # noqa: BLE001 - each codec raises its own error type
        raise BodyCompressionError(f"not a valid {name} body: {err}") from None
    raise BodyCompressionError(f"unknown compression type in sys_flag {sys_flag:#x}")


def _module(name: str, package: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise BodyCompressionError(
            f"the body is compressed with {package.upper() if package == 'lz4' else 'ZSTD'}; "
            f"install the {package!r} package to inflate it (or read the raw bytes)"
        ) from None
