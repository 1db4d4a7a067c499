"""Concurrency and crashes with the official client: every acknowledged send is stored once.

Both tests are ``slow`` (tens of seconds): 8 x 5,000 sends, and a SIGKILL in the middle of a
SYNC-flush run followed by a restart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from broker_harness import BrokerProcess, by_uniq_key, read_records, wait_for

THREAD_COUNT = 8
MESSAGES_PER_THREAD = 5000
JOIN_DEADLINE_S = 600.0


def _message(rocketmq: ModuleType, topic: str, body: bytes) -> Any:
    message = rocketmq.Message()
    message.topic = topic
    message.body = body
    return message


@pytest.mark.slow
def test_eight_producer_threads_of_5000_messages_are_each_acknowledged_and_stored_once(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    broker = broker_factory("store.flush_policy=SYNC", "store.segment_size_bytes=4194304")
    producers = [official_producer(broker.address, ("load",)) for _ in range(THREAD_COUNT)]
    acked: list[dict[str, bytes]] = [{} for _ in range(THREAD_COUNT)]
    failures: list[BaseException] = []

    def work(index: int) -> None:
        try:
            for i in range(MESSAGES_PER_THREAD):
                body = f"thread {index} message {i}".encode()
                receipt = producers[index].send(_message(rocketmq, "load", body))
                acked[index][receipt.message_id] = body
        except BaseException as err:  # reported below; a thread cannot fail the test itself
            failures.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREAD_COUNT)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=JOIN_DEADLINE_S)
    assert not any(thread.is_alive() for thread in threads), "senders did not finish"
    assert not failures, failures[:3]
    for producer in producers:
        producer.shutdown()
    assert broker.stop() == 0

    expected = {mid: body for per_thread in acked for mid, body in per_thread.items()}
    assert len(expected) == THREAD_COUNT * MESSAGES_PER_THREAD
    records = [r for r in read_records(broker.store_dir) if r.topic == "load"]
    stored = by_uniq_key(records)
    assert len(records) == len(expected)  # nothing extra, nothing twice
    assert set(stored) == set(expected)
    assert all(stored[mid][0].body == body for mid, body in expected.items())


@pytest.mark.slow
def test_sigkill_mid_run_loses_no_acknowledged_message_with_sync_flush(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    settings = ("store.flush_policy=SYNC", "store.segment_size_bytes=262144")
    broker = broker_factory(*settings)
    producers = [official_producer(broker.address, ("crash",), 3) for _ in range(4)]
    acked: dict[str, bytes] = {}
    acked_lock = threading.Lock()
    stop_sending = threading.Event()

    def work(index: int) -> None:
        for i in range(100_000):  # bounded; the kill ends it long before
            if stop_sending.is_set():
                return
            body = f"thread {index} message {i}".encode()
            try:
                receipt = producers[index].send(_message(rocketmq, "crash", body))
            except Exception:
                return  # the broker is gone: this send was not acknowledged
            with acked_lock:
                acked[receipt.message_id] = body

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(producers))]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(acked) >= 6000, 300.0, "6000 acknowledged sends (several segments)")
    broker.kill()
    stop_sending.set()
    for thread in threads:
        thread.join(timeout=JOIN_DEADLINE_S)
    assert not any(thread.is_alive() for thread in threads)
    with acked_lock:
        survivors_expected = dict(acked)

    restarted = broker_factory(*settings, store_dir=broker.store_dir)  # recovers the killed store
    assert restarted.stop() == 0
    stored = by_uniq_key([r for r in read_records(broker.store_dir) if r.topic == "crash"])
    missing = [mid for mid in survivors_expected if mid not in stored]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:3]}"
    assert all(len(records) == 1 for records in stored.values())
    assert all(stored[mid][0].body == body for mid, body in survivors_expected.items())
    for producer in producers:
        producer.shutdown()
