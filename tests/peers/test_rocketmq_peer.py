"""Smoke test of bench/peers' RocketMQ 5.3.3 peer: it starts, takes a send from the official
Python client, and stops completely.

The harness (``bench/peers/rocketmq_peer.py``) fetches RocketMQ's jars with Maven once into
``bench/peers/.cache``. Stopping means: both JVMs (name server, proxy with the broker) have
exited, the gRPC port is closed and the temporary work dir (config, store, logs) is gone, also
when the ``with`` block is left by an exception.
"""

from __future__ import annotations

import socket
from types import ModuleType

import pytest

pytestmark = pytest.mark.slow

TOPIC = "PeerSmoke"


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_rocketmq_peer_takes_a_send_and_stops_cleanly_when_the_block_raises(
    rocketmq: ModuleType,
) -> None:
    """One start (two JVMs) for both: a block left by an exception is the harder exit."""
    from rocketmq_peer import RocketMQBroker  # bench/peers is on sys.path (conftest.py)

    with (
        pytest.raises(RuntimeError, match="boom"),
        RocketMQBroker(topics=(TOPIC,), heap="384m", namesrv_heap="128m") as broker,
    ):
        processes, workdir, port = broker.processes, broker.workdir, broker.grpc_port
        assert len(processes) == 2 and all(p.poll() is None for p in processes)
        assert workdir is not None and (workdir / "store" / "commitlog").is_dir()
        config = rocketmq.ClientConfiguration(
            broker.endpoint, rocketmq.Credentials(), request_timeout=10
        )
        producer = rocketmq.Producer(config, (TOPIC,))
        producer.startup()
        try:
            message = rocketmq.Message()
            message.topic = TOPIC
            message.body = b"x" * 100
            receipt = producer.send(message)
        finally:
            producer.shutdown()
        assert receipt.message_id
        assert receipt.offset == 0
        raise RuntimeError("boom")
    assert all(p.poll() is not None for p in processes), "a RocketMQ JVM outlived stop()"
    assert not workdir.exists()
    assert not _accepts(port)


def test_bad_flush_is_a_typed_error() -> None:
    from peer_common import PeerError
    from rocketmq_peer import RocketMQBroker

    with pytest.raises(PeerError, match="flush must be SYNC_FLUSH or ASYNC_FLUSH, got 'SYNC'"):
        RocketMQBroker(flush="SYNC")
