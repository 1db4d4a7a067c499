"""``HaServer``: a master's HA port (RocketMQ's ``HAConnection`` read + write services).

It serves every slave connection on the loop it is given: a broker's serving loop, the one
whose group commits end the transfers' wait and whose sends wait for the reports, so that
neither a commit's wake-up nor a report's release crosses threads (each such hop was up to
1-2 ms on a busy two-core machine, most of a SYNC_MASTER send's extra latency).
Per connection: the slave's first 8-byte report fixes where the transfer starts (0: the
master's first offset; RocketMQ starts at its last file, docs/REPLICATION.md); then chunks of
at most ``ha_transfer_batch_bytes``, never across a segment file, and only below the
CommitLog's ``committed_offset``: whole records in the segment files (a killed master keeps
them), not yet fsynced under SYNC. They go out as soon as they are committed, before the fsync
(``CommitLog.on_committed``), as RocketMQ's transfer reads its committed position: the slave's
copy overlaps the master's fsync, and a send is still acknowledged only once both are done.
Each later report is the slave's confirmed end; it counts as an acknowledgement
(``SlaveAcks``) only once the slave applied bytes sent on this connection, and never past
them, so a diverged or lying slave cannot acknowledge sends it does not hold.

Does not own: the wire format (``wire.py``), waiting sends (``acks.py``), the store.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass, field

from rmq_spark.broker.replication.acks import SlaveAcks
from rmq_spark.broker.replication.wire import HEADER, HEARTBEAT_INTERVAL_S, HOUSEKEEPING_S, REPORT
from rmq_spark.errors import BrokerError
from rmq_spark.store.message_store import MessageStore

__all__ = ["HaServer"]

log = logging.getLogger("rmq_spark.broker.replication")
_WRITE_BYTES = 4 << 20  # transfers queued before one drain (a slave far behind)


@dataclass(slots=True)
class _Slave:
    peer: str
    start: int
    sent: int
    report: int
    writer: asyncio.StreamWriter
    heard: float = field(default_factory=time.monotonic)  # the last report
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # a send started waiting


class HaServer:
    """Serves ``store``'s CommitLog to slaves on ``host:port`` (see the module docstring)."""

    def __init__(
        self, store: MessageStore, acks: SlaveAcks, batch_bytes: int, where: tuple[str, int, bool]
    ) -> None:
        self._store = store
        self.acks = acks
        self._batch = batch_bytes
        self._host, self._port, self._fallback = where
        self.port = 0
        self.slaves: list[_Slave] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._serving: concurrent.futures.Future[None] | None = None
        self._connections: set[asyncio.Task[None]] = set()  # one task per slave connection
        self._started = threading.Event()
        self._error: BaseException | None = None
        acks.on_wait = self._wake_transfers
        store.commitlog.on_committed = self._wake_transfers

    def _wake_transfers(self) -> None:
        """From any thread: bytes were committed or a send waits; they go out from the loop's
        next callback (on its own thread: after the commit's fsync was submitted, no hop)."""
        loop = self._loop
        if not self.slaves or loop is None or loop.is_closed():
            return
        if asyncio._get_running_loop() is loop:  # a commit on the serving loop itself
            loop.call_soon(self._push)
        else:
            loop.call_soon_threadsafe(self._push)

    def _push(self) -> None:
        """On the loop: queue each slave's committed bytes now (a waiting send's), unless a
        catch-up fills its socket (its transfer loop paces that one), and wake its loop."""
        commitlog = self._store.commitlog
        end, size = commitlog.committed_offset, commitlog.segment_size_bytes
        for slave in self.slaves:
            transport = slave.writer.transport
            sent = slave.sent
            if sent < end and not transport.is_closing():
                if transport.get_write_buffer_size() < _WRITE_BYTES:
                    slave.sent = self._write_transfers(slave.writer, sent, end, size)
            slave.wake.set()

    @property
    def address(self) -> str:
        return f"{self._host}:{self.port}"

    def start(self, loop: asyncio.AbstractEventLoop) -> HaServer:
        """Bind and serve on ``loop`` (running in another thread); raises ``BrokerError`` when
        the port cannot be bound. Its tasks end with ``stop`` or with the loop."""
        self._serving = asyncio.run_coroutine_threadsafe(self._run(), loop)
        self._started.wait()
        if self._error is not None:
            raise BrokerError(f"HA port {self._host}:{self._port}: {self._error}")
        return self

    def stop(self) -> None:
        """From any thread but the loop's."""
        loop, stopping, serving = self._loop, self._stopping, self._serving
        if loop is not None and stopping is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stopping.set)
            except RuntimeError:
                pass  # the loop closed meanwhile: its tasks were cancelled with it
        if serving is not None:
            concurrent.futures.wait([serving], timeout=5)
        self._store.commitlog.on_committed = None
        self.acks.release_all()

    async def _run(self) -> None:
        try:
            await self._main()
        except BaseException as err:  # reported by start() when binding failed
            self._error = self._error or err
            self._started.set()
            if not isinstance(err, Exception):
                raise

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        try:
            server = await asyncio.start_server(self._serve, self._host, self._port)
        except OSError as err:
            if not self._fallback:
                raise BrokerError(str(err)) from err
            server = await asyncio.start_server(self._serve, self._host, 0)
        self.port = server.sockets[0].getsockname()[1]
        self._started.set()
        async with server:
            await self._stopping.wait()
            server.close()
            # The connections end here too, so ``stop`` returns with none left on the loop.
            connections = [task for task in self._connections if not task.done()]
            for task in connections:
                task.cancel()
            await asyncio.gather(*connections, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = writer.get_extra_info("peername")[:2]
        peer = f"{host}:{port}"
        reading: asyncio.Task[None] | None = None
        me = asyncio.current_task()
        assert me is not None  # asyncio runs each connection in a task of its own
        self._connections.add(me)
        try:
            first = await asyncio.wait_for(reader.readexactly(8), HOUSEKEEPING_S)
            (offset,) = REPORT.unpack(first)
            store = self._store
            start = offset if offset > 0 else store.min_offset
            if start > store.max_offset:
                log.error(
                    "replication: slave %s reports offset %d, past this master's log end %d: "
                    "the logs diverge; refusing it",
                    peer, offset, store.max_offset,
                )  # fmt: skip
                writer.write(HEADER.pack(store.max_offset, 0))
                await writer.drain()
                return
            slave = _Slave(peer, start, start, offset, writer)
            # One queued run of transfers may wait while the next is read from the log.
            writer.transport.set_write_buffer_limits(high=2 * _WRITE_BYTES)
            log.info("replication: slave %s connected, transfer from offset %d", peer, start)
            self.acks.connected()
            self.slaves.append(slave)
            try:
                reading = asyncio.create_task(self._read_reports(reader, slave))
                await self._transfer(writer, slave, reading)
            finally:
                self.slaves.remove(slave)
                self.acks.disconnected()
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError) as err:
            log.info("replication: slave %s disconnected: %s", peer, err or type(err).__name__)
        except asyncio.CancelledError:  # the broker stops: its loop's tasks are cancelled
            # Not re-raised: this connection's task ends here, and asyncio's streams (3.11)
            # would log a cancelled connection task as an ERROR with a traceback.
            log.info("replication: slave %s disconnected: this broker stops", peer)
        except Exception as err:  # a deleted segment, a closed store: this slave only
            log.warning("replication: slave %s dropped: %s", peer, err)
        finally:
            if reading is not None:
                reading.cancel()
            writer.close()
            self._connections.discard(me)

    async def _read_reports(self, reader: asyncio.StreamReader, slave: _Slave) -> None:
        acks = self.acks
        while True:
            (offset,) = REPORT.unpack(await reader.readexactly(8))  # silence: ``_transfer``
            slave.report, slave.heard = offset, time.monotonic()
            if offset > slave.start:
                acks.report(min(offset, slave.sent))

    def _write_transfers(self, writer: asyncio.StreamWriter, sent: int, end: int, size: int) -> int:
        """Queue transfers from ``sent`` (each at most the batch size, never across a segment
        file) up to ``_WRITE_BYTES`` or ``end``; where they end. A slave far behind gets
        them back to back, one drain for many."""
        read, batch = self._store.commitlog.read, self._batch
        stop = min(end, sent + max(batch, _WRITE_BYTES))
        while sent < stop:
            data = read(sent, min(batch, stop - sent, size - sent % size))
            if not data:
                break
            writer.writelines((HEADER.pack(sent, len(data)), data))
            sent += len(data)
        return sent

    async def _transfer(
        self, writer: asyncio.StreamWriter, slave: _Slave, reading: asyncio.Task[None]
    ) -> None:
        commitlog, acks = self._store.commitlog, self.acks
        size = commitlog.segment_size_bytes
        stopping = self._stopping
        assert stopping is not None
        last_write = time.monotonic()
        while not reading.done() and not stopping.is_set():
            end = commitlog.committed_offset
            sent = slave.sent
            if sent < end:
                slave.sent = self._write_transfers(writer, sent, end, size)
                await writer.drain()
                last_write = time.monotonic()
                continue
            if time.monotonic() - slave.heard > HOUSEKEEPING_S:
                raise ConnectionError("no report from the slave for 20 s")
            if time.monotonic() - last_write > HEARTBEAT_INTERVAL_S:
                writer.write(HEADER.pack(sent, 0))
                await writer.drain()
                last_write = time.monotonic()
            try:  # woken at once when a send starts waiting (acks.on_wait)
                await asyncio.wait_for(slave.wake.wait(), 0.001 if acks.waiting else 0.01)
            except TimeoutError:
                pass
            slave.wake.clear()
        if reading.done() and not reading.cancelled():
            reading.result()  # the reason the slave went away
