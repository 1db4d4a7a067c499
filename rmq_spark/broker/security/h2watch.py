"""PURE: what the front reads of the HTTP/2 it relays: request sizes, answers, ends of streams.

Owns ``RequestGate`` (the client's bytes, whole frames at a time: each gRPC message's declared
length, the 5-byte prefix at its start, is booked in a budget before the frame carrying the
prefix goes on; a stream whose message does not fit waits, its frames held, while the
connection's other streams go on) and ``ResponseWatch`` (the broker's bytes, passed on as
they come: a response HEADERS frame means the connection has been answered a call; the end
of a stream, END_STREAM from the broker or RST_STREAM either way, gives its booking back).
The frames the front writes itself are built by ``h2frames.py``.

Only frame headers, SETTINGS and gRPC length prefixes are read: no HPACK. The front tells
clients grpc's SETTINGS with the largest frame lowered to ``FRAME_SIZE_MAX`` (grpc offers
4 MiB), so the gate holds at most one 16 KiB frame per connection while it reads it. A
connection's held frames are bounded (``HELD_BYTES_MAX``): past it, the stream being held is
refused: the client is answered a trailers-only RESOURCE_EXHAUSTED saying why (RST_STREAM
REFUSED_STREAM on a stream that already passed a message), grpc a CANCEL, and the
connection's flow-control window is given back to the client for the bytes dropped. Our
frames for the client go in at a frame boundary of grpc's (``ResponseWatch.inject``). Does
not own the budget (``limits.InflightBytes``) or the sockets (``front_link.py``).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable

from rmq_spark.broker.security.h2frames import (
    GRPC_RESOURCE_EXHAUSTED,
    H2_PREFACE,
    h2_frame,
    trailers,
    u32,
)

__all__ = [
    "FRAME_SIZE_MAX",
    "H2_PREFACE",
    "HELD_BYTES_MAX",
    "RequestGate",
    "ResponseWatch",
]

FRAME_SIZE_MAX = 16_384  # HTTP/2's default SETTINGS_MAX_FRAME_SIZE, told to every client
HELD_BYTES_MAX = 256 * 1024  # frames one connection may have waiting for the budget
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x8
_END_STREAM, _PADDED, _ACK = 0x1, 0x8, 0x1
_SETTINGS_MAX_FRAME_SIZE = 0x5
_REFUSED_STREAM, _CANCEL = 0x7, 0x8
_REFUSED_REMEMBERED = 64
_GRPC_PREFIX = 5  # compressed flag, 4-byte big-endian length
_END_HEADERS, _CONTINUATION, _PUSH_PROMISE = 0x4, 0x9, 0x5
_FRAME_HEADER = struct.Struct(">BHBBI")  # length (high byte, low 16 bits), type, flags, stream
_U32 = struct.Struct(">I")
_OVER_BUDGET = "rmq-spark: broker.inflight_request_bytes_max reached, request refused; retry later"


class _Stream:
    __slots__ = ("booked", "held", "passed", "prefix", "remaining")

    def __init__(self) -> None:
        self.passed = False  # a DATA frame of it went to grpc
        self.remaining = 0  # bytes still to come of the current gRPC message
        self.prefix = b""  # a length prefix cut by a frame boundary
        self.booked = 0  # the current message's declared length, booked in the budget
        self.held: deque[bytes] | None = None  # frames waiting for the budget, in order


class RequestGate:
    """The client -> broker half of one connection.

    ``book(n)`` asks the budget for ``n`` bytes (``False``: not now), ``give(n)`` returns
    them; a message declared longer than ``unbooked_over`` (grpc's receive limit) is passed
    unbooked: grpc refuses it at its prefix. ``feed`` and ``retry`` return the bytes to pass
    on now; ``retry`` after the budget had bytes given back. Raises ``ValueError`` on a
    stream that is not HTTP/2 or a frame over ``FRAME_SIZE_MAX`` (to be closed).
    """

    def __init__(
        self, book: Callable[[int], bool], give: Callable[[int], None], unbooked_over: int
    ) -> None:
        self._book, self._give, self._unbooked_over = book, give, unbooked_over
        self._buffer = bytearray()
        self._preface = False
        self._streams: dict[int, _Stream] = {}
        self._waiting: deque[int] = deque()  # streams with held frames, oldest first
        self._held_bytes = 0
        self._refused: deque[int] = deque(maxlen=_REFUSED_REMEMBERED)
        self.to_client = bytearray()  # our own frames for the client (refusals), to send
        self.request_sent = False  # a whole request went to grpc (END_STREAM passed on)

    @property
    def waiting(self) -> bool:
        return bool(self._waiting)

    @property
    def incomplete(self) -> bool:
        """A booked message has bytes still to come (its booking waits on the client)."""
        return any(s.booked and (s.remaining or s.prefix) for s in self._streams.values())

    def feed(self, data: bytes) -> bytes:
        start = 0
        if self._buffer or not self._preface:  # a frame cut by the last read, or the start
            self._buffer += data
            data = bytes(self._buffer)
            self._buffer.clear()
            if not self._preface:
                if not data.startswith(H2_PREFACE[: len(data)]) or (
                    len(data) >= len(H2_PREFACE) and not data.startswith(H2_PREFACE)
                ):
                    raise ValueError("not an HTTP/2 client preface")
                if len(data) < len(H2_PREFACE):
                    self._buffer += data
                    return b""
                self._preface = True
                start = len(H2_PREFACE)
        # Frames that pass unchanged are not copied: runs of them are cut out of ``data``.
        # A unary call's frames (HEADERS, the stream's WINDOW_UPDATE, one whole-message DATA)
        # are judged in this loop; any other frame, or any frame while a refused stream may
        # still send, takes ``_route``.
        size, first, out = len(data), 0, None
        unpack, streams, prefix_of = _FRAME_HEADER.unpack_from, self._streams, _U32.unpack_from
        while size - start >= 9:
            high, low, kind, flags, stream_id = unpack(data, start)
            length = high << 16 | low
            if length > FRAME_SIZE_MAX:
                raise ValueError(f"a {length}-byte HTTP/2 frame")
            end = start + 9 + length
            if end > size:
                break
            stream_id &= 0x7FFFFFFF  # the reserved bit, ignored as grpc does
            if not stream_id:
                start = end
                continue
            stream = streams.get(stream_id)
            if self._refused:
                pass
            elif stream is None:
                if kind == _HEADERS:
                    streams[stream_id] = _Stream()
                    if flags & _END_STREAM:
                        self.request_sent = True
                start = end  # a closed or unknown stream's other frames: grpc answers them
                continue
            elif stream.held:
                pass
            elif kind == _WINDOW_UPDATE:
                start = end
                continue
            elif (
                kind == _DATA
                and not (stream.remaining or stream.prefix or flags & _PADDED)
                and length >= _GRPC_PREFIX
                and prefix_of(data, start + 10)[0] == length - _GRPC_PREFIX
                and self._book_whole(stream, length - _GRPC_PREFIX)
            ):
                stream.passed = True
                if flags & _END_STREAM:
                    self.request_sent = True
                start = end
                continue
            if not self._route(data, start, end, kind, flags, stream_id, emit := bytearray()):
                out = out if out is not None else bytearray()  # emit: frames put in its place
                out += data[first:start]
                out += emit
                first = end
            start = end
        if start < size:
            self._buffer += data[start:]
        if out is None:
            return data if start == size and first == 0 else data[first:start]
        out += data[first:start]
        return bytes(out)

    def retry(self) -> bytes:
        out = bytearray()
        for _ in range(len(self._waiting)):
            stream_id = self._waiting.popleft()
            stream = self._streams.get(stream_id)
            if stream is not None and stream.held:
                self._drain(stream_id, stream, out)
        return bytes(out)

    def stream_ended(self, stream_id: int) -> None:
        """The stream is over (the broker ended it or either side reset it)."""
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            return
        if stream.held:
            self._held_bytes -= sum(len(frame) for frame in stream.held)
            self._waiting.remove(stream_id)
        if stream.booked:
            self._give(stream.booked)

    def streams_ended(self, stream_ids: list[int]) -> None:
        """``stream_ended`` for each of one read's ended streams."""
        streams = self._streams
        for stream_id in stream_ids:
            stream = streams.pop(stream_id, None)
            if stream is None:
                continue
            if stream.held:
                streams[stream_id] = stream
                self.stream_ended(stream_id)
            elif stream.booked:
                self._give(stream.booked)

    def close(self) -> None:
        """The connection is gone: give back every booking."""
        for stream_id in list(self._streams):
            self.stream_ended(stream_id)
        self._waiting.clear()

    def _route(
        self,
        data: bytes,
        start: int,
        end: int,
        kind: int,
        flags: int,
        stream_id: int,
        emit: bytearray,
    ) -> bool:
        """Whether the frame ``data[start:end]`` of stream ``stream_id`` (not 0) goes on
        unchanged; if not, it was held or dropped, and ``emit`` has what goes in its place."""
        stream_id &= 0x7FFFFFFF
        if not stream_id:  # the reserved bit alone
            return True
        if self._refused and stream_id in self._refused:  # it has not seen our RST_STREAM yet
            if kind == _DATA and end - start > 9:
                self.to_client += h2_frame(_WINDOW_UPDATE, 0, 0, u32(end - start - 9))
            return False
        if kind == _RST_STREAM:
            self.stream_ended(stream_id)  # held frames dropped: the client gave up on them
            return True
        stream = self._streams.get(stream_id)
        if stream is None:
            if kind != _HEADERS:
                return True  # a closed or unknown stream: grpc answers per HTTP/2
            stream = self._streams[stream_id] = _Stream()
        if not stream.held and (kind != _DATA or self._admit(stream, data, start, end, flags)):
            if kind == _DATA:
                stream.passed = True
            if flags & _END_STREAM:
                self.request_sent = True
            return True
        if not stream.held:
            self._waiting.append(stream_id)
        if stream.held is None:
            stream.held = deque()
        stream.held.append(data[start:end])
        self._held_bytes += end - start
        if self._held_bytes > HELD_BYTES_MAX:
            self._refuse(stream_id, stream, emit)
        return False

    def _refuse(self, stream_id: int, stream: _Stream, out: bytearray) -> None:
        dropped = sum(len(frame) - 9 for frame in stream.held if frame[3] == _DATA)
        self.stream_ended(stream_id)
        self._refused.append(stream_id)
        out += h2_frame(_RST_STREAM, 0, stream_id, u32(_CANCEL))
        if stream.passed:  # grpc may have answered on it: a reset, not a second response
            self.to_client += h2_frame(_RST_STREAM, 0, stream_id, u32(_REFUSED_STREAM))
        else:
            block = trailers(GRPC_RESOURCE_EXHAUSTED, _OVER_BUDGET)
            self.to_client += h2_frame(_HEADERS, _END_STREAM | _END_HEADERS, stream_id, block)
        if dropped:
            self.to_client += h2_frame(_WINDOW_UPDATE, 0, 0, u32(dropped))

    def _drain(self, stream_id: int, stream: _Stream, out: bytearray) -> None:
        while stream.held:
            frame = stream.held[0]
            if frame[3] == _DATA and not self._admit(stream, frame, 0, len(frame), frame[4]):
                self._waiting.append(stream_id)
                return
            out += stream.held.popleft()
            self._held_bytes -= len(frame)
            stream.passed = stream.passed or frame[3] == _DATA
            self.request_sent = self.request_sent or bool(frame[4] & _END_STREAM)

    def _book_whole(self, stream: _Stream, declared: int) -> bool:
        """Book a DATA frame that is one whole gRPC message of ``declared`` bytes (the
        stream between messages, nothing held); ``False``: it does not fit now."""
        if declared > self._unbooked_over:
            declared = 0
        booked = stream.booked
        if declared != booked:
            if declared > booked and not self._book(declared - booked):
                return False
            if declared < booked:
                self._give(booked - declared)
            stream.booked = declared
        return True

    def _admit(self, stream: _Stream, frame: bytes, start: int, end: int, flags: int) -> bool:
        """Walk the DATA frame ``frame[start:end]`` for message starts; book the last one's
        declared length (the ones before it on this stream have been passed on whole)."""
        begin = start + 9
        if flags & _PADDED and end > begin:
            end -= frame[begin]
            begin += 1
        remaining, prefix, declared = stream.remaining, stream.prefix, -1
        position = begin
        while position < end:
            if remaining:
                step = min(remaining, end - position)
                remaining -= step
                position += step
                continue
            if not prefix and end - position >= _GRPC_PREFIX:  # a whole prefix in the frame
                remaining = declared = _U32.unpack_from(frame, position + 1)[0]
                position += _GRPC_PREFIX
                continue
            take = min(_GRPC_PREFIX - len(prefix), end - position)
            prefix += frame[position : position + take]
            position += take
            if len(prefix) == _GRPC_PREFIX:
                remaining = declared = int.from_bytes(prefix[1:], "big")
                prefix = b""
        if declared > self._unbooked_over:
            declared = 0
        if declared >= 0 and declared != stream.booked:
            if declared > stream.booked and not self._book(declared - stream.booked):
                return False
            if declared < stream.booked:
                self._give(stream.booked - declared)
            stream.booked = declared
        stream.remaining, stream.prefix = remaining, prefix
        return True


class ResponseWatch:
    """The broker -> client half: frame headers read, the bytes passed on as they come, but
    for SETTINGS, whose largest frame size is lowered to ``FRAME_SIZE_MAX``.

    ``feed`` returns the bytes for the client and the streams that ended in ``data``;
    ``answered`` turns true at the first response HEADERS (a call was answered).
    """

    def __init__(self) -> None:
        self.answered = False
        self._header = b""
        self._skip = 0  # payload bytes of the current frame still to pass
        self._settings: bytearray | None = None  # a SETTINGS payload being read
        self._in_block = False  # between HEADERS and their last CONTINUATION
        self._injected = bytearray()  # our frames, waiting for a frame boundary

    def inject(self, frames: bytes) -> bytes:
        """Our own frames for the client: returned to write now at a frame boundary, else
        kept and put in at the next boundary by ``feed``."""
        if self._at_boundary() and not self._injected:
            return frames
        self._injected += frames
        return b""

    def _at_boundary(self) -> bool:
        return not self._skip and not self._header and not self._in_block

    def feed(self, data: bytes) -> tuple[bytes, list[int]]:
        ended: list[int] = []
        position, size = 0, len(data)
        if not (self._skip or self._header or self._injected or self._settings is not None):
            # The frames that pass unchanged, from a frame boundary with nothing to put in,
            # up to a frame header that is cut or a SETTINGS to rewrite (``_feed_rest``).
            unpack = _FRAME_HEADER.unpack_from
            while size - position >= 9:
                high, low, kind, flags, stream_id = unpack(data, position)
                if kind == _DATA:
                    if flags & _END_STREAM:
                        ended.append(stream_id & 0x7FFFFFFF)
                elif kind == _HEADERS:
                    self._in_block = not flags & _END_HEADERS
                    if stream_id:
                        self.answered = True
                        if flags & _END_STREAM:
                            ended.append(stream_id & 0x7FFFFFFF)
                elif kind == _SETTINGS and not flags & _ACK and (high or low):
                    break
                elif kind == _RST_STREAM:
                    ended.append(stream_id & 0x7FFFFFFF)
                elif kind == _PUSH_PROMISE or kind == _CONTINUATION:
                    self._in_block = not flags & _END_HEADERS
                position += 9 + (high << 16 | low)
                if position > size:  # the payload goes on in the next read
                    self._skip = position - size
                    return data, ended
            if position == size:
                return data, ended
        return self._feed_rest(data, position, ended)

    def _feed_rest(self, data: bytes, position: int, ended: list[int]) -> tuple[bytes, list[int]]:
        """``feed`` from ``position`` on, where frames are cut, rewritten or put in."""
        size = len(data)
        pieces: list[bytes] = []
        mark = 0  # data[mark:] not yet in pieces
        unpack = _FRAME_HEADER.unpack_from
        while position < size:
            if self._injected and self._at_boundary():
                pieces += (data[mark:position], bytes(self._injected))
                mark = position
                self._injected.clear()
            if self._skip:
                step = min(self._skip, size - position)
                self._skip -= step
                position += step
                if self._settings is not None:
                    self._settings += data[mark:position]
                    mark = position
                    if not self._skip:
                        pieces.append(_lower_frame_size(self._settings))
                        self._settings = None
                continue
            if self._header or size - position < 9:  # a header cut by a read
                take = min(9 - len(self._header), size - position)
                self._header += data[position : position + take]
                position += take
                if len(self._header) < 9:
                    break
                high, low, kind, flags, stream_id = unpack(self._header)
                self._header = b""
            else:
                high, low, kind, flags, stream_id = unpack(data, position)
                position += 9
            length = high << 16 | low
            stream_id &= 0x7FFFFFFF
            if kind == _DATA:
                if flags & _END_STREAM:
                    ended.append(stream_id)
            elif kind == _HEADERS:
                self._in_block = not flags & _END_HEADERS
                if stream_id:
                    self.answered = True
                    if flags & _END_STREAM:
                        ended.append(stream_id)
            elif kind == _SETTINGS and not flags & _ACK and length:
                pieces.append(data[mark:position])
                mark, self._settings = position, bytearray()
            elif kind == _RST_STREAM:
                ended.append(stream_id)
            elif kind == _PUSH_PROMISE or kind == _CONTINUATION:
                self._in_block = not flags & _END_HEADERS
            if self._settings is None and size - position >= length:
                position += length  # the whole payload is here: passed on as it is
            else:
                self._skip = length
        if self._injected and self._at_boundary():
            pieces += (data[mark:], bytes(self._injected))
            mark = size
            self._injected.clear()
        if not pieces and not mark:  # nothing taken out or put in: passed on as it came
            return data, ended
        pieces.append(data[mark:])
        return b"".join(pieces), ended


def _lower_frame_size(payload: bytearray) -> bytes:
    for at in range(0, len(payload) - 5, 6):
        if int.from_bytes(payload[at : at + 2], "big") == _SETTINGS_MAX_FRAME_SIZE:
            payload[at + 2 : at + 6] = u32(FRAME_SIZE_MAX)
    return bytes(payload)
