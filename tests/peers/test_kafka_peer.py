"""Smoke test of bench/peers' Kafka peer: it starts, takes a connection, and stops completely.

The harness (``bench/peers/kafka_peer.py``) fetches Kafka's jars with Maven once, the same way
``make test`` fetches the Delta jars, into ``bench/peers/.cache`` (a second run downloads
nothing). Stopping means: the JVM has exited, the port is closed and the temporary log dirs are
gone, also when the ``with`` block is left by an exception.
"""

from __future__ import annotations

import socket

import pytest

pytestmark = pytest.mark.slow


def _load_peer():  # noqa: ANN202
    import kafka_peer  # bench/peers is on sys.path (conftest.py)

    return kafka_peer


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_kafka_broker_starts_and_stops_cleanly() -> None:
    peer = _load_peer()
    with peer.KafkaBroker(heap="384m") as broker:
        process, workdir, port = broker.process, broker.workdir, broker.port
        assert process is not None and process.poll() is None
        assert workdir is not None and (workdir / "logs" / "meta.properties").exists()
        assert _accepts(port)
    assert process.poll() is not None, "the broker JVM is still running after stop()"
    assert not workdir.exists()
    assert not _accepts(port)


def test_kafka_broker_stops_when_the_block_raises() -> None:
    peer = _load_peer()
    with pytest.raises(RuntimeError, match="boom"), peer.KafkaBroker(heap="384m") as broker:
        process, workdir = broker.process, broker.workdir
        raise RuntimeError("boom")
    assert process.poll() is not None
    assert not workdir.exists()


def test_bad_partitions_is_a_typed_error() -> None:
    peer = _load_peer()
    with pytest.raises(peer.PeerError, match="partitions must be >= 1, got 0"):
        peer.KafkaBroker(partitions=0)
