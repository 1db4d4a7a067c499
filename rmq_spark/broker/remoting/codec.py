"""PURE: RocketMQ's remoting frame (``RemotingCommand``), both header serializations.

One frame (REMOTING_PROTOCOL.md 1.1)::

    int32 length = 4 + H + B | byte serialize type | uint24 H | header (H bytes) | body (B bytes)

The header is JSON (type 0, 1.3) or RocketMQ's binary form (type 1, 1.4). ``decode_frame``
takes the bytes of a stream and returns the first command with the bytes it used, or
``NeedMoreData``; anything that breaks the layout raises ``RemotingFrameError`` (the caller
closes the connection, as Netty's decoder does). ``encode_frame`` writes JSON by default, the
form every Java, Go and C++ peer reads (1.5).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from rmq_spark.broker.fastjson import FastjsonError, parse_fastjson
from rmq_spark.errors import RemotingFrameError

__all__ = [
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "FRAME_MAX_BYTES",
    "LANGUAGES",
    "NeedMoreData",
    "RemotingCommand",
    "SerializeType",
    "VERSION_5_3_3",
    "decode_frame",
    "decode_header",
    "decode_one",
    "encode_frame",
]

FLAG_RESPONSE = 1  # RPC_TYPE bit: the command answers a request
FLAG_ONEWAY = 2  # RPC_ONEWAY bit: a request that gets no answer
FRAME_MAX_BYTES = 16_777_216  # com.rocketmq.remoting.frameMaxLength, compared to length + 4
VERSION_5_3_3 = 479  # MQVersion.Version.V5_3_3.ordinal()
LANGUAGES = (
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO",
    "PHP", "OMS", "RUST", "NODE_JS",
)  # fmt: skip
_LANGUAGE_BYTE = {name: index for index, name in enumerate(LANGUAGES)}
_HEADER_LENGTH_MAX = 0xFFFFFF
_BINARY_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")


class SerializeType(IntEnum):
    JSON = 0
    ROCKETMQ = 1


@dataclass(frozen=True, slots=True)
class NeedMoreData:
    """Not a whole frame yet: ``have`` of ``need`` bytes (``need`` unknown before 4 bytes)."""

    have: int
    need: int


@dataclass(frozen=True, slots=True)
class RemotingCommand:
    """One request or response; ``ext_fields`` is the custom header, strings only (1.7)."""

    code: int
    opaque: int = 0
    flag: int = 0
    language: str = "JAVA"
    version: int = VERSION_5_3_3
    remark: str | None = None
    ext_fields: dict[str, str] | None = None
    body: bytes = b""
    serialize_type: SerializeType = field(default=SerializeType.JSON, compare=False)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)


def encode_frame(command: RemotingCommand, serialize_type: SerializeType | None = None) -> bytes:
    """The whole frame of ``command``, header in ``serialize_type`` (default: its own).

    Raises ``RemotingFrameError`` for what the form cannot carry (a ROCKETMQ code past int16,
    an unknown language, a header past 16 MiB)."""
    kind = command.serialize_type if serialize_type is None else serialize_type
    header = _json_header(command) if kind == SerializeType.JSON else _binary_header(command)
    if len(header) > _HEADER_LENGTH_MAX:
        raise RemotingFrameError(f"header of {len(header)} bytes does not fit 24 bits")
    length = 4 + len(header) + len(command.body)
    return b"".join(
        (_INT.pack(length), _INT.pack((int(kind) << 24) | len(header)), header, command.body)
    )


def decode_frame(
    data: bytes | bytearray | memoryview, max_frame_bytes: int = FRAME_MAX_BYTES
) -> tuple[RemotingCommand, int] | NeedMoreData:
    """The first frame of ``data`` and the bytes it took, or ``NeedMoreData``.

    Raises ``RemotingFrameError``: a length below 4 or whose frame (length + 4) passes
    ``max_frame_bytes``, a header length past the frame, an unknown serialize type, or a
    header that does not decode."""
    view = memoryview(data)
    if len(view) < 4:
        return NeedMoreData(len(view), 0)
    (length,) = _INT.unpack_from(view, 0)
    if length < 4:
        raise RemotingFrameError(f"frame length {length} is below the 4 header-length bytes")
    if length + 4 > max_frame_bytes:
        raise RemotingFrameError(
            f"frame of {length + 4} bytes is over the limit of {max_frame_bytes} bytes"
        )
    if len(view) < 4 + length:
        return NeedMoreData(len(view), 4 + length)
    (word,) = _INT.unpack_from(view, 4)
    header_length, kind = word & _HEADER_LENGTH_MAX, (word >> 24) & 0xFF
    if header_length > length - 4:
        raise RemotingFrameError(
            f"header length {header_length} is past the frame ({length - 4} bytes after it)"
        )
    header = view[8 : 8 + header_length]
    body = bytes(view[8 + header_length : 4 + length])
    return decode_header(header, kind, body), 4 + length


def decode_one(
    data: bytes | bytearray | memoryview, max_frame_bytes: int = FRAME_MAX_BYTES
) -> RemotingCommand:
    """The one whole frame ``data`` holds; a truncated frame or bytes after it raise
    ``RemotingFrameError`` (for a frame read to the end, e.g. from a closed connection)."""
    outcome = decode_frame(data, max_frame_bytes)
    if isinstance(outcome, NeedMoreData):
        need = f"{outcome.need}" if outcome.need else "at least 4"
        raise RemotingFrameError(f"truncated frame: {outcome.have} of {need} bytes")
    command, used = outcome
    if used != len(data):
        raise RemotingFrameError(f"{len(data) - used} bytes after the frame")
    return command


def decode_header(header: bytes | memoryview, kind: int, body: bytes = b"") -> RemotingCommand:
    """The command of one header of serialize type ``kind`` (0 JSON, 1 ROCKETMQ)."""
    if kind == SerializeType.JSON:
        return _from_json(bytes(header), body)
    if kind == SerializeType.ROCKETMQ:
        return _from_binary(memoryview(header), body)
    raise RemotingFrameError(f"unknown serialize type {kind} (0 JSON and 1 ROCKETMQ exist)")


def _json_header(command: RemotingCommand) -> bytes:
    # fastjson's bean order: alphabetical, nulls left out (REMOTING_PROTOCOL.md 1.3).
    document: dict[str, Any] = {"code": command.code}
    if command.ext_fields is not None:
        document["extFields"] = command.ext_fields
    document.update(flag=command.flag, language=command.language, opaque=command.opaque)
    if command.remark is not None:
        document["remark"] = command.remark
    document.update(serializeTypeCurrentRPC="JSON", version=command.version)
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def _binary_header(command: RemotingCommand) -> bytes:
    language = _LANGUAGE_BYTE.get(command.language)
    if language is None:
        raise RemotingFrameError(f"language {command.language!r} has no ROCKETMQ byte")
    for name in ("code", "version"):
        if not -32768 <= getattr(command, name) <= 32767:
            raise RemotingFrameError(f"{name} {getattr(command, name)} does not fit int16")
    remark = (command.remark or "").encode()
    fields = bytearray()
    for key, value in (command.ext_fields or {}).items():
        key_bytes, value_bytes = key.encode(), str(value).encode()
        fields += _SHORT.pack(len(key_bytes)) + key_bytes
        fields += _INT.pack(len(value_bytes)) + value_bytes
    fixed = _BINARY_FIXED.pack(
        command.code, language, command.version, command.opaque, command.flag
    )
    return b"".join((fixed, _INT.pack(len(remark)), remark, _INT.pack(len(fields)), fields))


def _from_json(header: bytes, body: bytes) -> RemotingCommand:
    try:
        text = header.decode()
    except UnicodeDecodeError as err:
        raise RemotingFrameError(f"JSON header is not UTF-8: {err}") from None
    try:
        document = json.loads(text)
    except ValueError:
        try:
            document = parse_fastjson(text)  # fastjson's own dialect (unquoted keys)
        except FastjsonError as err:
            raise RemotingFrameError(f"JSON header does not parse: {err}") from None
    if not isinstance(document, dict):
        raise RemotingFrameError("JSON header is not an object")
    ext = document.get("extFields")
    if ext is not None and not isinstance(ext, dict):
        raise RemotingFrameError("JSON header's extFields is not an object")
    remark = document.get("remark")
    return RemotingCommand(
        code=_json_int(document, "code", required=True),
        opaque=_json_int(document, "opaque"),
        flag=_json_int(document, "flag"),
        language=str(document.get("language") or "JAVA"),
        version=_json_int(document, "version"),
        remark=None if remark is None else str(remark),
        ext_fields=None if ext is None else {str(k): _string(v) for k, v in ext.items()},
        body=body,
        serialize_type=SerializeType.JSON,
    )


def _json_int(document: dict[str, Any], key: str, *, required: bool = False) -> int:
    value = document.get(key)
    if value is None and not required:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
        raise RemotingFrameError(f"JSON header's {key} is not an int32: {value!r}")
    return value


def _string(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))  # a Java toString of a number / bool


def _from_binary(header: memoryview, body: bytes) -> RemotingCommand:
    if len(header) < _BINARY_FIXED.size + 8:
        raise RemotingFrameError(f"ROCKETMQ header of {len(header)} bytes is below 21")
    code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
    position = _BINARY_FIXED.size
    remark, position = _binary_bytes(header, position, _INT, "remark")
    fields_length, position = _binary_length(header, position, _INT, "extFields")
    end = position + fields_length
    ext: dict[str, str] | None = {} if fields_length else None
    while position < end:
        key, position = _binary_bytes(header[:end], position, _SHORT, "extFields key")
        value, position = _binary_bytes(header[:end], position, _INT, "extFields value")
        if key and value:  # Java reads a zero-length string as null and skips the entry
            assert ext is not None
            ext[_utf8(key, "extFields key")] = _utf8(value, "extFields value")
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        language=LANGUAGES[language] if 0 <= language < len(LANGUAGES) else "OTHER",
        version=version,
        remark=_utf8(remark, "remark") if remark else None,
        ext_fields=ext,
        body=body,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _binary_length(
    view: memoryview, position: int, size: struct.Struct, what: str
) -> tuple[int, int]:
    if position + size.size > len(view):
        raise RemotingFrameError(f"ROCKETMQ header ends inside the length of its {what}")
    (length,) = size.unpack_from(view, position)
    position += size.size
    if length < 0 or position + length > len(view):
        raise RemotingFrameError(f"ROCKETMQ header's {what} length {length} is past its end")
    return length, position


def _binary_bytes(
    view: memoryview, position: int, size: struct.Struct, what: str
) -> tuple[bytes, int]:
    length, position = _binary_length(view, position, size, what)
    return bytes(view[position : position + length]), position + length


def _utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as err:
        raise RemotingFrameError(f"ROCKETMQ header's {what} is not UTF-8: {err}") from None
