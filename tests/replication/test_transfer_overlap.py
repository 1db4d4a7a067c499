"""A SYNC_MASTER sends a record's bytes to its slave as soon as they are in the CommitLog's
files, before its own fsync ends (as RocketMQ's transfer reads its committed position): the
slave's copy and the master's fsync overlap instead of adding up. Appends still staged in
memory (a killed master would not have them) are never sent; the send is still acknowledged
only after the fsync (``test_master_slave.py`` holds that across kill -9).

In one process: a SYNC store whose fsyncs wait on a gate (``GatedOpener``), its ``HaServer``,
and a slave spoken byte by byte on the HA port."""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from broker.broker_harness import wait_for
from store_helpers import GatedOpener, open_store

from rmq_spark.broker.replication.acks import SlaveAcks
from rmq_spark.broker.replication.master import HaServer
from rmq_spark.broker.replication.wire import HEADER, REPORT
from rmq_spark.store.config import FlushPolicy
from rmq_spark.store.put import PutRequest, PutStatus


def _transfer(slave: socket.socket) -> tuple[int, bytes]:
    """The next transfer with bytes (heartbeats skipped): its offset and bytes."""
    while True:
        offset, size = HEADER.unpack(_exactly(slave, HEADER.size))
        if size:
            return offset, _exactly(slave, size)


def _exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        got = sock.recv(count - len(data))
        assert got, "the master closed the HA connection"
        data += got
    return data


def _put_in_thread(store: Any, body: bytes, results: list[Any]) -> threading.Thread:
    thread = threading.Thread(target=lambda: results.append(store.put(PutRequest("A", body))))
    thread.start()
    return thread


# ``stop`` ends the slave connections: none is left pending on the loop it closes.
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_sync_masters_record_reaches_the_slave_while_its_fsync_is_under_way_staged_ones_not(
    tmp_path: Path,
) -> None:
    opener = GatedOpener()
    gate = opener.release
    gate.clear()
    store = open_store(tmp_path / "master", opener=opener, flush_policy=FlushPolicy.SYNC,
                       stage_writes=True)  # fmt: skip
    loop = asyncio.new_event_loop()  # a broker's serving loop, in its own thread
    serving = threading.Thread(target=loop.run_forever, daemon=True)
    serving.start()
    server = HaServer(store, SlaveAcks(5.0), 32 << 10, ("127.0.0.1", 0, False)).start(loop)
    results: list[Any] = []
    puts: list[threading.Thread] = []
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as slave:
            slave.sendall(REPORT.pack(0))  # an empty slave: from the log's start
            puts.append(_put_in_thread(store, b"first", results))
            offset, data = _transfer(slave)  # the gate is shut: no fsync has ended
            assert not gate.is_set() and puts[0].is_alive() and not results
            assert offset == 0 and b"first" in data
            assert store.flushed_offset == 0 < store.commitlog.committed_offset == len(data)
            # The one fsync in flight is stuck: the next put stays staged, in memory only.
            puts.append(_put_in_thread(store, b"second", results))
            wait_for(lambda: store.max_offset > len(data), 10, "the second put's append")
            assert store.commitlog.committed_offset == len(data)
            slave.settimeout(0.5)
            with pytest.raises(TimeoutError):
                _transfer(slave)  # ... and is not sent
            slave.settimeout(10)
            gate.set()
            offset, rest = _transfer(slave)
            assert offset == len(data) and b"second" in rest
            for put in puts:
                put.join(10)
            assert [r.status for r in results] == [PutStatus.PUT_OK] * 2
    finally:
        gate.set()
        for put in puts:
            put.join(10)
        server.stop()
        loop.call_soon_threadsafe(loop.stop)
        serving.join(10)
        loop.close()
        store.close()
