"""One remoting client connection: frames in, handler tasks, frames out, the broker's requests.

Owns ``Connection`` (an asyncio protocol, one per client; no thread): it books each frame's
declared length in the server's budget of request bytes before buffering it (reading pauses
until the budget has room), decodes frames with the codec's size limit (a frame that breaks
the layout is one log line and a closed connection, as Netty's decoder closes it), runs each
request as its own task (many in flight: an async producer's sends are answered as they
finish, each with its opaque), except that the requests of one read whose code is served in
waves (a producer's sends: ``calls.WaveHandler``) share one task; it pauses reading while
``MAX_IN_FLIGHT`` requests are running or the client does not read its answers, and matches
the client's responses to the broker's own
requests (``send_request``) by opaque.

Does not own: what a request means or who may send it (``server.py`` dispatches and checks),
admission and timeouts (``server.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from rmq_spark.broker.remoting.codec import (
    FLAG_ONEWAY,
    NeedMoreData,
    RemotingCommand,
    SerializeType,
    decode_frame,
    encode_frame,
)
from rmq_spark.errors import RemotingFrameError

if TYPE_CHECKING:
    from rmq_spark.broker.remoting.calls import WaveHandler
    from rmq_spark.broker.remoting.server import RemotingServer

__all__ = ["Connection", "MAX_IN_FLIGHT"]

log = logging.getLogger("rmq_spark.broker")

MAX_IN_FLIGHT = 1024  # requests of one connection running at once; more wait in the socket
_IDS = itertools.count(1)


class Connection(asyncio.Protocol):
    """A client connection from its first byte to its close (implements ``calls.ClientLink``)."""

    def __init__(self, server: RemotingServer, host: str, port: int, tls: bool) -> None:
        self._server = server
        self.link_id = next(_IDS)
        self.peer_host, self.peer_port, self.tls = host, port, tls
        self.language = "JAVA"
        self.version = 0
        self.serialize_type = SerializeType.JSON
        self.closed = False
        self.proven = False  # a whole frame came in
        self._loop = asyncio.get_running_loop()
        self.accepted_at = self.last_data = self.last_activity = self._loop.time()
        self._transport: Any = None
        self._buffer = bytearray()
        self._booked = 0  # budget bytes booked for the frame being received
        self._pause_reasons: set[str] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self._running = 0  # requests being served (a wave's task serves several)
        self._joining: dict[WaveHandler, list[tuple[RemotingCommand, int]]] = {}  # this read's
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaques = itertools.count(1)
        self._on_close: list[Callable[[], None]] = []

    @property
    def peer(self) -> str:
        return f"{self.peer_host}:{self.peer_port}"

    @property
    def partial(self) -> bool:
        """Bytes of an unfinished frame are buffered."""
        return bool(self._buffer)

    # --- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self.last_data = self._loop.time()
        self._buffer += data
        self._read_frames()

    def eof_received(self) -> bool | None:
        return None  # close the connection

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._give_booking()
        self._server.forget(self)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError(f"connection to {self.peer} closed"))
        self._pending.clear()
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            try:
                callback()
            except Exception as err:  # one line: a listener must not break the close
                log.warning("remoting: a close listener of %s failed: %r", self.peer, err)

    def pause_writing(self) -> None:
        self._pause("writing")  # the client does not read its answers: stop reading requests

    def resume_writing(self) -> None:
        self._resume("writing")

    # --- frames in -----------------------------------------------------------------------

    def _read_frames(self) -> None:
        try:
            self._read_whole_frames()
        finally:
            if self._joining:
                self._start_waves()

    def _read_whole_frames(self) -> None:
        server = self._server
        while not self.closed and "budget" not in self._pause_reasons:
            buffer = self._buffer
            if len(buffer) >= 4 and not self._booked:
                need = int.from_bytes(buffer[:4], "big", signed=True) + 4
                if 8 <= need <= server.frame_max_bytes:  # else decode_frame says what is wrong
                    if not server.book(self, need):
                        self._pause("budget")  # server.budget_freed resumes us
                        return
                    self._booked = need
            try:
                outcome = decode_frame(buffer, server.frame_max_bytes)
            except RemotingFrameError as err:
                server.note_bad_frame(self, str(err))
                self.close()
                return
            if isinstance(outcome, NeedMoreData):
                return
            command, used = outcome
            del buffer[:used]
            booked, self._booked = self._booked, 0
            self.proven = True
            self.last_activity = self._loop.time()
            self._received(command, booked)

    def budget_freed(self) -> None:
        """The server's budget has room again: book the waiting frame and go on reading."""
        if "budget" in self._pause_reasons:
            self._pause_reasons.discard("budget")
            self._read_frames()
            if "budget" not in self._pause_reasons:
                self._update_reading()

    def _received(self, command: RemotingCommand, booked: int) -> None:
        if command.is_response:
            self._server.give(booked)
            future = self._pending.pop(command.opaque, None)
            if future is not None and not future.done():
                future.set_result(command)
            return  # an unmatched response is dropped, as RocketMQ does
        self.language, self.version = command.language, command.version
        self.serialize_type = command.serialize_type
        self._running += 1
        wave = self._server.wave_handler(command.code)
        if wave is not None:  # served with the others of this read (_start_waves)
            self._joining.setdefault(wave, []).append((command, booked))
        else:
            self._track(self._server.dispatch(self, command), booked, 1)
        if self._running >= MAX_IN_FLIGHT:
            self._pause("requests")

    def _start_waves(self) -> None:
        joining, self._joining = self._joining, {}
        for wave, requests in joining.items():
            commands = [command for command, _ in requests]
            booked = sum(nbytes for _, nbytes in requests)
            self._track(self._server.dispatch_wave(self, wave, commands), booked, len(requests))

    def _track(self, serving: Coroutine[Any, Any, None], booked: int, requests: int) -> None:
        """Run ``serving`` (``requests`` requests, counted in ``_running``); when it ends,
        their booked bytes go back and reading resumes below the cap."""
        task = self._loop.create_task(serving)
        self.tasks.add(task)
        task.add_done_callback(lambda done: self._request_done(done, booked, requests))

    def _request_done(self, task: asyncio.Task[None], booked: int, requests: int) -> None:
        self.tasks.discard(task)
        self._server.give(booked)
        self._running -= requests
        self.last_activity = self._loop.time()
        if self._running < MAX_IN_FLIGHT:
            self._resume("requests")

    # --- frames out ----------------------------------------------------------------------

    def write(self, command: RemotingCommand) -> None:
        """Send ``command`` (a response or a request), if the connection is still open."""
        if self.closed or self._transport is None:
            return
        self._transport.write(encode_frame(command))
        self.last_activity = self._loop.time()

    async def send_request(
        self, command: RemotingCommand, timeout_ms: int
    ) -> RemotingCommand | None:
        """See ``calls.ClientLink.send_request``."""
        if self.closed:
            raise ConnectionError(f"connection to {self.peer} is closed")
        opaque = next(self._opaques) & 0x7FFFFFFF
        request = RemotingCommand(
            code=command.code,
            opaque=opaque,
            flag=command.flag & FLAG_ONEWAY,
            remark=command.remark,
            ext_fields=command.ext_fields,
            body=command.body,
        )
        if request.is_oneway:
            self.write(request)
            return None
        future: asyncio.Future[RemotingCommand] = self._loop.create_future()
        self._pending[opaque] = future
        try:
            self.write(request)
            return await asyncio.wait_for(future, timeout_ms / 1000)
        finally:
            self._pending.pop(opaque, None)

    def on_close(self, callback: Callable[[], None]) -> None:
        if self.closed:
            callback()
        else:
            self._on_close.append(callback)

    # --- life ----------------------------------------------------------------------------

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _give_booking(self) -> None:
        booked, self._booked = self._booked, 0
        if booked:
            self._server.give(booked)

    def _pause(self, reason: str) -> None:
        self._pause_reasons.add(reason)
        self._update_reading()

    def _resume(self, reason: str) -> None:
        if reason in self._pause_reasons:
            self._pause_reasons.discard(reason)
            self._update_reading()
            if not self._pause_reasons:
                self._read_frames()  # frames that arrived while paused

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._pause_reasons:
            if transport.is_reading():
                transport.pause_reading()
        elif not transport.is_reading():
            transport.resume_reading()
