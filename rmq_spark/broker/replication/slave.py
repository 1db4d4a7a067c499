"""``HaClient``: a slave's replication connection (RocketMQ's ``DefaultHAClient``).

One thread: connect to ``ha_master``, report where to resume (``ReplicaLog.start``: the start
of the slave's last record, so the first bytes received are checked against what the slave
holds), then apply every transfer through the store's ``ReplicaLog`` and report the store's
confirmed end after each applied chunk that moved it, and at least every 5 s. A lost
connection is retried after 5 s; a refused stream (gap, diverged log, corrupt record) stops
replication with one ERROR line and ``refused`` set: never silently merged.

Does not own: the append rules (``store/replica_log.py``), the wire format (``wire.py``).
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time

from rmq_spark.broker.config import parse_listen
from rmq_spark.broker.replication.acks import Lag
from rmq_spark.broker.replication.state import write_state
from rmq_spark.broker.replication.wire import (
    HEADER,
    HEARTBEAT_INTERVAL_S,
    HOUSEKEEPING_S,
    RECONNECT_S,
    REPORT,
)
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.replica_log import ReplicaRefusedError

__all__ = ["HaClient"]

log = logging.getLogger("rmq_spark.broker.replication")
_RECV_BYTES = 4 * 1024 * 1024  # RocketMQ's slave read buffer
_BATCH_BYTES = 8 * 1024 * 1024  # received bytes applied as one run at most (about)
_WAIT_MS = 500  # a wait for bytes; the stop flag and the silence check run in between
_STATE_INTERVAL_S = 1.0  # how often config/replication.json is rewritten while replicating


class HaClient:
    """Replicates ``master`` (host:port) into ``store`` (see the module docstring)."""

    def __init__(self, store: MessageStore, master: str) -> None:
        self._store = store
        self._master = parse_listen(master)
        self._replica = store.replica_log()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ha-client", daemon=True)
        self.refused: str | None = None
        self.connected = False
        self.master_offset = 0  # the end of the master's log as far as its transfers showed
        self._behind_since: float | None = None
        self._master_text = master
        self._noted = 0.0

    def start(self) -> HaClient:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def lag(self) -> Lag:
        """Bytes the master has sent or shown that this store has not confirmed yet."""
        behind = max(0, self.master_offset - self._store.confirmed_offset)
        now = time.monotonic()
        if behind == 0:
            self._behind_since = None
        elif self._behind_since is None:
            self._behind_since = now
        since = 0.0 if self._behind_since is None else now - self._behind_since
        return Lag(behind, since, int(self.connected), self._store.confirmed_offset)

    def _run(self) -> None:
        host, port = self._master
        while not self._stop.is_set():
            try:
                with socket.create_connection((host, port), timeout=HOUSEKEEPING_S) as sock:
                    self.connected = True
                    self._session(sock)
            except ReplicaRefusedError as err:
                self.refused = str(err)
                log.error("replication from %s:%d refused: %s", host, port, err)
                return
            except (OSError, ConnectionError) as err:
                log.warning("replication: master %s:%d: %s; retrying in %.0f s",
                            host, port, err, RECONNECT_S)  # fmt: skip
            finally:
                self.connected = False
            self._stop.wait(RECONNECT_S)

    def _session(self, sock: socket.socket) -> None:
        replica, store = self._replica, self._store
        resume = replica.start()
        self.master_offset = max(self.master_offset, resume)
        sock.sendall(REPORT.pack(resume))
        log.info("replication: connected to %s:%d, resuming at offset %d",
                 *self._master, resume)  # fmt: skip
        link = _Link(sock)
        buffer = bytearray()
        reported, last_report = resume, time.monotonic()
        last_read = time.monotonic()
        while not self._stop.is_set():
            if link.receive(buffer):
                last_read = time.monotonic()
            elif time.monotonic() - last_read > HOUSEKEEPING_S:
                raise ConnectionError("nothing from the master for 20 s")
            self._apply(buffer)
            confirmed = store.confirmed_offset
            now = time.monotonic()
            if confirmed > reported or now - last_report > HEARTBEAT_INTERVAL_S:
                link.send(REPORT.pack(confirmed))
                reported, last_report = confirmed, now
            if now - self._noted > _STATE_INTERVAL_S:
                self._note_state(now)

    def _note_state(self, now: float) -> None:
        """``config/replication.json`` (``promote`` reads it once this slave is stopped)."""
        self._noted = now
        try:
            write_state(self._store.root_dir, self._master_text, self.master_offset,
                        self._store.confirmed_offset)  # fmt: skip
        except OSError as err:
            log.warning("replication: cannot write the slave's state file: %s", err)

    def _apply(self, buffer: bytearray) -> None:
        """Apply every whole transfer at the front of ``buffer`` (and remove it). Transfers
        that continue one another inside one segment file are applied as one run: the store
        checks and writes their records in bulk."""
        replica = self._replica
        size = self._store.commitlog.segment_size_bytes
        used = 0
        run: list[memoryview] = []
        run_start = run_end = -1
        with memoryview(buffer) as view:
            while len(buffer) - used >= HEADER.size:
                offset, length = HEADER.unpack_from(buffer, used)
                if length < 0 or len(buffer) - used - HEADER.size < length:
                    break
                start = used + HEADER.size
                used = start + length
                if run and (offset != run_end or offset // size != run_start // size):
                    self._feed(run_start, run)
                    run = []
                if length == 0:  # a heartbeat: where the master's transfer stands
                    if offset < replica.next_offset:
                        raise ReplicaRefusedError(
                            f"the master's log ends at offset {offset}, before this slave's "
                            f"{replica.next_offset}: the logs diverge; refusing to merge"
                        )
                    continue
                if not run:
                    run_start = offset
                run.append(view[start:used])
                run_end = offset + length
            if run:
                self._feed(run_start, run)
            run = []
        del buffer[:used]

    def _feed(self, offset: int, pieces: list[memoryview]) -> None:
        data = b"".join(pieces)
        self._replica.feed(offset, data)
        self.master_offset = max(self.master_offset, offset + len(data))


class _Link:
    """The slave's socket, non-blocking: wait for bytes (``poll``), then take whatever else
    has arrived (up to ``_BATCH_BYTES``) into one reused buffer, so that a catch-up is
    applied in large runs and a live stream's small transfer costs no large allocation."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # reports go out at once
        self._sock = sock
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)
        self._scratch = bytearray(_RECV_BYTES)
        self._view = memoryview(self._scratch)

    def receive(self, buffer: bytearray) -> bool:
        """Append what arrives within ``_WAIT_MS`` to ``buffer``; ``False``: nothing did."""
        if not self._poll.poll(_WAIT_MS):
            return False
        sock, view = self._sock, self._view
        got = False
        while len(buffer) < _BATCH_BYTES:
            try:
                count = sock.recv_into(view)
            except (BlockingIOError, InterruptedError):
                break
            if not count:
                if got:
                    break  # closed: the next call says so
                raise ConnectionError("the master closed the connection")
            buffer += view[:count]
            got = True
        return got

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[self._sock.send(view) :]
            except (BlockingIOError, InterruptedError):
                ready = select.select([], [self._sock], [], HOUSEKEEPING_S)[1]
                if not ready:
                    raise ConnectionError("the master reads no reports for 20 s") from None
