from __future__ import annotations

import errno
import random
import threading
import time

import pytest

from rmq_spark.store.flush import FlushWait, GroupCommit, Housekeeper, PeriodicTask, _Waiter


class FakeLog:
    """A log whose flush is gated by an event: lets tests hold an fsync open."""

    def __init__(self) -> None:
        self.written = 0
        self.flushed = 0
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail_with: OSError | None = None
        self.calls = 0

    def flush(self) -> int:
        target = self.written
        self.entered.set()
        self.gate.wait()
        self.calls += 1
        if self.fail_with is not None:
            raise self.fail_with
        self.flushed = target
        return target


def _group(log: FakeLog, max_in_flight: int = 1) -> GroupCommit:
    return GroupCommit(log.flush, lambda: log.written, max_in_flight=max_in_flight)


def test_covered_offset_returns_without_an_fsync() -> None:
    log = FakeLog()
    group = GroupCommit(log.flush, lambda: log.written, flushed_offset=100)
    assert group.wait_durable(100, 10) is FlushWait.DURABLE
    assert log.calls == 0


def test_a_lone_waiter_leads_its_own_fsync() -> None:
    log = FakeLog()
    group = _group(log)
    log.written = 50
    assert group.wait_durable(50, 1000) is FlushWait.DURABLE
    assert (log.calls, group.flushed_offset, group.fsync_count) == (1, 50, 1)


def test_waiters_behind_a_running_fsync_share_the_next_one() -> None:
    log = FakeLog()
    group = _group(log)
    log.written = 10
    log.gate.clear()
    outcomes: list[FlushWait] = []
    leader = threading.Thread(target=lambda: outcomes.append(group.wait_durable(10, None)))
    leader.start()
    assert log.entered.wait(10)
    log.written = 100  # ten more puts were written while the fsync ran
    followers = [
        threading.Thread(target=lambda end=end: outcomes.append(group.wait_durable(end, None)))
        for end in range(20, 101, 10)
    ]
    for thread in followers:
        thread.start()
    while len(group._waiters) < len(followers):  # noqa: SLF001 - wait until all are queued
        threading.Event().wait(0.001)
    log.gate.set()
    for thread in [leader, *followers]:
        thread.join()
    assert outcomes == [FlushWait.DURABLE] * 10
    assert log.calls == 2  # the leader's fsync, then one for all nine followers


def test_a_waiter_times_out_while_the_fsync_hangs() -> None:
    log = FakeLog()
    group = _group(log)
    log.written = 10
    log.gate.clear()
    leader = threading.Thread(target=lambda: group.wait_durable(10, None))
    leader.start()
    assert log.entered.wait(10)
    log.written = 20
    assert group.wait_durable(20, 1) is FlushWait.TIMEOUT
    log.gate.set()
    leader.join()
    assert group.wait_durable(20, 1000) is FlushWait.DURABLE


def test_a_failed_fsync_fails_every_wait_from_then_on() -> None:
    log = FakeLog()
    group = _group(log)
    log.written = 10
    log.fail_with = OSError(errno.EIO, "disk gone")
    assert group.wait_durable(10, 1000) is FlushWait.FAILED
    log.fail_with = None
    log.written = 20
    assert group.wait_durable(20, 1000) is FlushWait.FAILED
    with pytest.raises(OSError, match="disk gone"):
        group.flush_now()


def test_flush_now_covers_everything_written() -> None:
    log = FakeLog()
    group = _group(log)
    log.written = 77
    assert group.flush_now() == 77


def test_housekeeper_runs_tasks_and_survives_a_failing_one() -> None:
    ran = threading.Event()
    runs = {"bad": 0}

    def bad() -> None:
        runs["bad"] += 1
        raise RuntimeError("boom")

    keeper = Housekeeper(
        [PeriodicTask("bad", 1, bad), PeriodicTask("good", 1, ran.set), PeriodicTask("off", 0, bad)]
    )
    keeper.start()
    assert ran.wait(10)
    ran.clear()
    assert ran.wait(10)  # still running after "bad" raised
    keeper.stop()
    assert runs["bad"] >= 1


class ConcurrentLog:
    """A log whose flush takes a little while and may run in several threads at once;
    records the most flushes that ever overlapped."""

    def __init__(self, seed: int) -> None:
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self.written = 0
        self.flushed = 0
        self.running = 0
        self.most_running = 0
        self.calls = 0

    def write(self) -> int:
        with self._lock:
            self.written += 1
            return self.written

    def flush(self) -> int:
        with self._lock:
            target = self.written
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            pause = self._random.random() / 2000
        threading.Event().wait(pause)
        with self._lock:
            self.running -= 1
            self.calls += 1
            self.flushed = max(self.flushed, target)
            return self.flushed


@pytest.mark.parametrize("max_in_flight", [1, 2, 3])
def test_every_put_is_acknowledged_only_after_an_fsync_covers_it(max_in_flight: int) -> None:
    log = ConcurrentLog(seed=max_in_flight)
    group = GroupCommit(log.flush, lambda: log.written, max_in_flight=max_in_flight)
    early: list[tuple[int, int]] = []
    outcomes: list[FlushWait] = []

    def producer() -> None:
        for _ in range(150):
            end = log.write()
            time.sleep(0)  # let other producers run between the write and the wait
            outcome = group.wait_durable(end, 10_000)
            outcomes.append(outcome)
            if log.flushed < end:
                early.append((end, log.flushed))

    threads = [threading.Thread(target=producer) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes == [FlushWait.DURABLE] * (16 * 150)
    assert early == []  # nobody returned before its record was flushed
    assert 1 <= log.most_running <= max_in_flight
    assert log.calls < 16 * 150 // 2  # producers shared fsyncs
    assert group.flushed_offset == log.written


def test_a_put_arriving_during_a_running_fsync_starts_a_second_one_when_two_may_run() -> None:
    log = FakeLog()
    group = _group(log, max_in_flight=2)
    log.written = 10
    log.gate.clear()
    first = threading.Thread(target=lambda: group.wait_durable(10, None))
    first.start()
    assert log.entered.wait(10)
    log.entered.clear()
    log.written = 20
    second = threading.Thread(target=lambda: group.wait_durable(20, None))
    second.start()
    assert log.entered.wait(10)  # the second fsync started while the first still runs
    log.written = 30
    assert group.wait_durable(30, 1) is FlushWait.TIMEOUT  # two run: the third waits
    log.gate.set()
    for thread in (first, second):
        thread.join()
    assert group.wait_durable(30, None) is FlushWait.DURABLE
    assert group.flushed_offset == 30


def test_fail_wakes_every_waiter_with_failed() -> None:
    log = FakeLog()
    group = _group(log)
    log.written = 10
    log.gate.clear()
    leader = threading.Thread(target=lambda: group.wait_durable(10, None))
    leader.start()
    assert log.entered.wait(10)
    outcomes: list[FlushWait] = []
    log.written = 50
    waiters = [
        threading.Thread(target=lambda end=end: outcomes.append(group.wait_durable(end, None)))
        for end in range(20, 51, 10)
    ]
    for thread in waiters:
        thread.start()
    while len(group._waiters) < len(waiters):  # noqa: SLF001 - wait until all are queued
        threading.Event().wait(0.001)
    group.fail(OSError(errno.EIO, "disk gone"))
    for thread in waiters:
        thread.join()
    assert outcomes == [FlushWait.FAILED] * 4
    log.gate.set()
    leader.join()
    assert group.wait_durable(60, None) is FlushWait.FAILED


def test_max_in_flight_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_in_flight"):
        GroupCommit(lambda: 0, lambda: 0, max_in_flight=0)


def test_puts_arriving_while_a_wake_up_chain_runs_wait_for_its_end_then_share_one_fsync() -> None:
    log = FakeLog()
    group = _group(log)
    log.written = 40
    running_chain = _Waiter()
    group._ready.append(running_chain)  # noqa: SLF001 - a chain is waking durable puts
    # Nothing is being fsynced, but a put does not lead while the chain runs: the woken
    # puts are about to write, and one fsync after the chain covers them all.
    assert group.wait_durable(40, 1) is FlushWait.TIMEOUT
    assert log.calls == 0
    outcomes: list[FlushWait] = []
    waiters = [
        threading.Thread(target=lambda end=end: outcomes.append(group.wait_durable(end, None)))
        for end in (20, 30, 40)
    ]
    for thread in waiters:
        thread.start()
    while len(group._waiters) < len(waiters):  # noqa: SLF001 - wait until all are queued
        threading.Event().wait(0.001)
    group._wake_next()  # noqa: SLF001 - wakes the chain's last put...
    group._wake_next()  # noqa: SLF001 - ...which finds the chain ended and hands over
    for thread in waiters:
        thread.join()
    assert outcomes == [FlushWait.DURABLE] * 3
    assert log.calls == 1
