"""Keeping a broker registered with RocketMQ name servers, as ``BrokerController`` does.

``NamesrvRegistration`` runs one asyncio loop in a daemon thread. It registers with every name
server at start, again every ``interval_s`` and as soon as the topic table changes (RocketMQ's
incremental registration after a topic is created), and unregisters on ``stop()``. Each name
server gets one long-lived connection (``NamesrvConnection``): a name server drops every broker
registered over a connection the moment it closes (REMOTING_PROTOCOL.md 3.1), so the connection
is what keeps the broker listed between registrations. A name server that is down or answers an
error is logged in one line and tried again at the next round; the broker keeps serving.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from rmq_spark.broker.config_files.rocketmq_config import DataVersion
from rmq_spark.broker.remoting.codec import (
    FRAME_MAX_BYTES,
    NeedMoreData,
    RemotingCommand,
    decode_frame,
    encode_frame,
)
from rmq_spark.broker.remoting.namesrv_api import (
    RESPONSE_SUCCESS,
    BrokerIdentity,
    register_broker,
    registered_topics,
    unregister_broker,
)
from rmq_spark.errors import RemotingFrameError

__all__ = ["NamesrvConnection", "NamesrvRegistration"]

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 3.0  # RocketMQ's client connect timeout
REGISTER_TIMEOUT_S = 24.0  # RocketMQ's registerBrokerTimeoutMills
UNREGISTER_TIMEOUT_S = 3.0  # a stop waits at most this long for each name server
CHANGE_CHECK_S = 1.0  # how often the topic table is compared with the last registered one


class NamesrvConnection:
    """One connection to one name server; ``call`` sends a request and awaits its response.

    Calls are one at a time (a lock); a failed call closes the connection, and the next call
    connects again. Raises ``OSError`` / ``TimeoutError`` (unreachable, no answer) or
    ``RemotingFrameError`` (the peer broke the framing)."""

    def __init__(self, host: str, port: int, *, max_frame_bytes: int = FRAME_MAX_BYTES) -> None:
        self.address = f"{host}:{port}"
        self._host, self._port = host, port
        self._max_frame_bytes = max_frame_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._buffer = bytearray()
        self._opaques = itertools.count()
        self._lock = asyncio.Lock()

    async def call(self, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
        async with self._lock:
            try:
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel (a stop)
                # that arrives as its inner call completes, and the call then runs on
                async with asyncio.timeout(timeout_s):
                    return await self._call(request)
            except BaseException:
                await self.close()
                raise

    async def _call(self, request: RemotingCommand) -> RemotingCommand:
        if self._writer is None:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
            self._buffer = bytearray()  # a new one: a failed decode may still hold a view
        opaque = next(self._opaques) & 0x7FFFFFFF
        self._writer.write(encode_frame(_with_opaque(request, opaque)))
        await self._writer.drain()
        while True:
            response = await self._read_command()
            if response.is_response and response.opaque == opaque:
                return response
            log.debug("namesrv %s: ignored command code %d", self.address, response.code)

    async def _read_command(self) -> RemotingCommand:
        assert self._reader is not None
        while True:
            outcome = decode_frame(bytes(self._buffer), self._max_frame_bytes)
            if not isinstance(outcome, NeedMoreData):
                command, used = outcome
                self._buffer = self._buffer[used:]
                return command
            chunk = await self._reader.read(65536)
            if not chunk:
                if self._buffer:
                    raise RemotingFrameError(
                        f"connection closed inside a frame ({len(self._buffer)} bytes)"
                    )
                raise ConnectionResetError("connection closed by the name server")
            self._buffer += chunk

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass


def _with_opaque(command: RemotingCommand, opaque: int) -> RemotingCommand:
    return dataclasses.replace(command, opaque=opaque)


class NamesrvRegistration:
    """Registers ``identity`` with ``addresses`` until ``stop()``; ``topics`` returns the
    broker's topic -> queue count table (called from the registration thread)."""

    def __init__(
        self,
        addresses: tuple[tuple[str, int], ...],
        identity: BrokerIdentity,
        topics: Callable[[], Mapping[str, int]],
        *,
        interval_s: float,
        timeout_s: float = REGISTER_TIMEOUT_S,
    ) -> None:
        self.identity = identity
        self._connections = [NamesrvConnection(host, port) for host, port in addresses]
        self._topics = topics
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._version = DataVersion()
        self._last_topics: dict[str, int] | None = None
        self._states: dict[str, str] = {}  # address -> last outcome, logged on change
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()  # set from stop() through the loop
        self._thread = threading.Thread(target=self._run, name="namesrv-registration", daemon=True)

    def start(self) -> NamesrvRegistration:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Unregister from every name server (each within ``UNREGISTER_TIMEOUT_S``), close,
        join."""
        if not self._thread.is_alive():
            return
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        next_round = 0.0
        while not self._stop.is_set():
            topics = dict(self._topics())
            if topics != self._last_topics or time.monotonic() >= next_round:
                if topics != self._last_topics:
                    self._version = self._version.next(int(time.time() * 1000))
                    self._last_topics = topics
                await self._until_stopped(self._register_all(topics))
                next_round = time.monotonic() + self._interval_s
            try:
                async with asyncio.timeout(CHANGE_CHECK_S):
                    await self._stop.wait()
            except TimeoutError:
                pass
        await self._unregister_all()

    async def _until_stopped(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work``; ``stop()`` cancels it (a name server that never answers must not hold
        up the broker's stop for the 24 s of a registration)."""
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        for future in (task, stopped):
            future.cancel()
        await asyncio.gather(task, stopped, return_exceptions=True)

    async def _register_all(self, topics: dict[str, int]) -> None:
        request = register_broker(
            self.identity, registered_topics(topics, self.identity), self._version
        )
        await asyncio.gather(*(self._call(conn, request, "register") for conn in self._connections))

    async def _unregister_all(self) -> None:
        request = unregister_broker(self.identity)
        await asyncio.gather(
            *(self._call(conn, request, "unregister") for conn in self._connections)
        )
        for conn in self._connections:
            await conn.close()

    async def _call(self, conn: NamesrvConnection, request: RemotingCommand, what: str) -> None:
        timeout_s = self._timeout_s if what == "register" else UNREGISTER_TIMEOUT_S
        try:
            response = await conn.call(request, timeout_s)
        except (OSError, TimeoutError, RemotingFrameError) as err:
            self._note(conn.address, what, _reason(err))
            return
        except Exception as err:  # a bug must not end the registration thread
            self._note(conn.address, what, f"{type(err).__name__}: {err}")
            log.debug("namesrv %s: details", conn.address, exc_info=True)
            return
        if response.code != RESPONSE_SUCCESS:
            remark = response.remark or "no remark"
            self._note(conn.address, what, f"answered code {response.code}: {remark}")
            return
        self._note(conn.address, what, None)

    def _note(self, address: str, what: str, problem: str | None) -> None:
        """Log an outcome once per change of state (not every round)."""
        state = ("failed: " + problem) if problem else "ok"
        if what == "register" and self._states.get(address) == state:
            return
        self._states[address] = state
        who = f"broker {self.identity.broker_name} ({self.identity.addr})"
        if problem is None and what == "register":
            log.info(
                "namesrv %s: registered %s in cluster %s with %d topics",
                address, who, self.identity.cluster_name, len(self._last_topics or {}) + 2,
            )  # fmt: skip
        elif problem is None:
            log.info("namesrv %s: unregistered %s", address, who)
        else:
            retry = f"; retrying every {self._interval_s:g} s" if what == "register" else ""
            log.warning("namesrv %s: %s %s failed: %s%s", address, what, who, problem, retry)


def _reason(err: BaseException) -> str:
    if isinstance(err, TimeoutError):
        return "no answer in time"
    return str(err) or type(err).__name__
