"""SIGKILL a process that is putting; every acknowledged message survives recovery."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.message_store import MessageStore

WORKER = Path(__file__).with_name("kill_worker.py")
ACKS_BEFORE_KILL = 3000


def _run_and_kill(
    root: Path, mode: str, threads: int, *extra: str
) -> tuple[list[tuple[int, int, str]], int]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), str(root), mode, str(threads), *extra],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert worker.stdout is not None
    acks: list[tuple[int, int, str]] = []
    flushed = 0
    try:
        for line in worker.stdout:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "ACK":
                offset, size, body = rest.split(" ", 2)
                acks.append((int(offset), int(size), body))
                if len(acks) >= ACKS_BEFORE_KILL:
                    worker.send_signal(signal.SIGKILL)
                    break
            elif kind == "FLUSHED":
                flushed = max(flushed, int(rest))
        # Lines written before the kill are still in the pipe.
        for line in worker.stdout:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "ACK":
                offset, size, body = rest.split(" ", 2)
                acks.append((int(offset), int(size), body))
            elif kind == "FLUSHED":
                flushed = max(flushed, int(rest))
    finally:
        worker.kill()
        worker.wait(timeout=60)
    assert worker.returncode == -signal.SIGKILL
    return acks, flushed


def _recover(root: Path, policy: FlushPolicy) -> MessageStore:
    config = StoreConfig(root_dir=root, segment_size_bytes=64 * 1024, flush_policy=policy)
    return MessageStore.open(config)


@pytest.mark.slow
def test_every_acknowledged_sync_put_survives_sigkill(tmp_path: Path) -> None:
    acks, _ = _run_and_kill(tmp_path, "SYNC", threads=4)
    assert len(acks) >= ACKS_BEFORE_KILL
    store = _recover(tmp_path, FlushPolicy.SYNC)
    try:
        assert not store.recovery_report.clean_shutdown
        for offset, _size, body in acks:
            assert store.read(offset).body.decode() == body
        assert len(store.commitlog.segments) > 1
    finally:
        store.close()


@pytest.mark.slow
def test_every_acknowledged_sync_put_async_survives_sigkill(tmp_path: Path) -> None:
    # 16 coroutines on one loop: staged segments, fsyncs through io_uring where available.
    acks, _ = _run_and_kill(tmp_path, "SYNC", 16, "asyncio")
    assert len(acks) >= ACKS_BEFORE_KILL
    store = _recover(tmp_path, FlushPolicy.SYNC)
    try:
        assert not store.recovery_report.clean_shutdown
        for offset, _size, body in acks:
            assert store.read(offset).body.decode() == body
        assert len(store.commitlog.segments) > 1
    finally:
        store.close()


@pytest.mark.slow
def test_async_puts_up_to_the_last_flush_survive_sigkill(tmp_path: Path) -> None:
    acks, flushed = _run_and_kill(tmp_path, "ASYNC", threads=2)
    assert flushed > 0
    store = _recover(tmp_path, FlushPolicy.ASYNC)
    try:
        durable = [(o, s, b) for o, s, b in acks if o + s <= flushed]
        assert durable
        for offset, _size, body in durable:
            assert store.read(offset).body.decode() == body
        # A killed process loses nothing from the page cache: the rest is there too.
        for offset, _size, body in acks:
            assert store.read(offset).body.decode() == body
    finally:
        store.close()
