"""Under ASYNC, a put thread that wrote a batch of ``cq_dispatch._INLINE_RECORDS`` or more
dispatches it itself (``CqDispatcher.after_write``): the units are there when the put
returns, the same units the thread writes, one round at a time, and a failed round stops
dispatching without failing the put."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from cq_helpers import actual_units, expected_units
from store_helpers import open_store

from rmq_spark.store import cq_dispatch
from rmq_spark.store.config import FlushPolicy
from rmq_spark.store.consume_queues import ConsumeQueues
from rmq_spark.store.put import PutRequest

BIG = getattr(cq_dispatch, "_INLINE_RECORDS", 128)
SEGMENT = 1 << 20


def _batch(n: int, queues: int = 4) -> list[PutRequest]:
    return [PutRequest("T", b"m%d" % i, queue_id=i % queues, tags="TagA") for i in range(n)]


def test_a_large_async_batch_is_dispatched_before_its_put_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the thread's safety net an hour away and no wake-up (a large batch wakes
    # nobody), only the writer can have dispatched the batch.
    monkeypatch.setattr(cq_dispatch, "_IDLE_WAIT_S", 3600.0)
    store = open_store(tmp_path, flush_policy=FlushPolicy.ASYNC, segment_size_bytes=SEGMENT)
    try:
        queues = store.consume_queues
        assert all(r.ok for r in store.put_batch(_batch(BIG)))
        assert queues.dispatched_offset == store.max_offset
        assert store.put_columns("T", [b"c"] * BIG, list(range(4)) * (BIG // 4)).ok
        assert queues.dispatched_offset == store.max_offset
        assert sum(queues.max_offset("T", q) for q in range(4)) == 2 * BIG
        assert actual_units(store) == expected_units(store)
    finally:
        store.close()


def test_a_large_batch_waits_for_the_threads_round_then_is_dispatched_before_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread is mid-round (a single put woke it) when a large batch is written: the
    batch's writer waits for that round, then runs its own, rather than leaving its batch to
    the thread's next wake-up."""
    store = open_store(tmp_path, flush_policy=FlushPolicy.ASYNC, segment_size_bytes=SEGMENT)
    place_runs = ConsumeQueues.place_runs
    in_round = threading.Event()

    def slow_in_the_thread(self: ConsumeQueues, runs: object) -> None:
        if threading.current_thread().name == "rmq-cq-dispatch":
            in_round.set()
            time.sleep(0.3)
        place_runs(self, runs)  # type: ignore[arg-type]

    monkeypatch.setattr(ConsumeQueues, "place_runs", slow_in_the_thread)
    try:
        assert store.put(PutRequest("T", b"one", tags="TagA")).ok
        assert in_round.wait(30)
        assert all(r.ok for r in store.put_batch(_batch(BIG)))
        assert store.consume_queues.dispatched_offset == store.max_offset
        assert actual_units(store) == expected_units(store)
    finally:
        store.close()


def test_a_small_batch_and_a_single_put_are_left_to_the_thread(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.ASYNC, segment_size_bytes=SEGMENT)
    try:
        store.put_batch(_batch(BIG - 1))
        store.put(PutRequest("T", b"one", tags="TagA"))
        assert store.consume_queues.wait_dispatched(store.max_offset, 30)
        assert actual_units(store) == expected_units(store)
    finally:
        store.close()


def test_writers_racing_the_thread_write_every_unit_once(tmp_path: Path) -> None:
    store = open_store(
        tmp_path, flush_policy=FlushPolicy.ASYNC, segment_size_bytes=SEGMENT,
        consume_queue_file_units=64,
    )  # fmt: skip
    errors: list[BaseException] = []

    def produce(seed: int) -> None:
        try:
            for round_ in range(30):
                if (seed + round_) % 3:
                    assert all(r.ok for r in store.put_batch(_batch(BIG + seed, 3)))
                else:
                    assert store.put(PutRequest("T", b"s", queue_id=seed % 3, tags="X")).ok
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    threads = [threading.Thread(target=produce, args=(seed,)) for seed in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        assert store.consume_queues.wait_dispatched(store.max_offset, 30)
        assert store.consume_queues.failure is None
        assert actual_units(store) == expected_units(store)
    finally:
        store.close()


def test_a_failed_round_in_a_put_thread_stops_dispatching_not_the_put(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cq_dispatch, "_IDLE_WAIT_S", 3600.0)  # only the writer's round fails
    store = open_store(tmp_path, flush_policy=FlushPolicy.ASYNC, segment_size_bytes=SEGMENT)
    try:
        queues = store.consume_queues
        store.put_batch(_batch(BIG))
        dispatched = queues.dispatched_offset

        def disk_error(self: ConsumeQueues, runs: object) -> None:
            raise OSError(5, "Input/output error (injected)")

        monkeypatch.setattr(ConsumeQueues, "place_runs", disk_error)
        assert all(r.ok for r in store.put_batch(_batch(BIG)))
        assert isinstance(queues.failure, OSError)
        assert all(r.ok for r in store.put_batch(_batch(BIG)))  # no second round, no raise
        assert store.put(PutRequest("T", b"after", tags="TagA")).ok
        assert not queues.wait_dispatched(store.max_offset, 0.5)
        assert queues.dispatched_offset == dispatched
    finally:
        store.close()


def test_an_interrupted_round_stops_dispatching_and_the_reopen_writes_every_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cq_dispatch, "_IDLE_WAIT_S", 3600.0)  # only the writer's round fails
    # Ctrl-C in a put thread's round may come after it took facts it never placed: going on
    # would leave a hole in the queue (pre-blank units), so dispatching stops until reopen.
    store = open_store(tmp_path, flush_policy=FlushPolicy.ASYNC, segment_size_bytes=SEGMENT)
    try:
        store.put_batch(_batch(BIG))
        place_runs = ConsumeQueues.place_runs

        def interrupted(self: ConsumeQueues, runs: object) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(ConsumeQueues, "place_runs", interrupted)
        with pytest.raises(KeyboardInterrupt):
            store.put_batch(_batch(BIG))
        monkeypatch.setattr(ConsumeQueues, "place_runs", place_runs)
        assert isinstance(store.consume_queues.failure, KeyboardInterrupt)
        assert all(r.ok for r in store.put_batch(_batch(BIG)))
        assert store.consume_queues.max_offset("T", 0) == BIG // 4  # the first batch only
    finally:
        store.close()
    store = open_store(tmp_path, flush_policy=FlushPolicy.ASYNC, segment_size_bytes=SEGMENT)
    try:
        assert store.consume_queues.max_offset("T", 0) == 3 * BIG // 4
        assert actual_units(store) == expected_units(store)
    finally:
        store.close()
