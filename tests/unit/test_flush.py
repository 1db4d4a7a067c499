from __future__ import annotations

import errno
import threading

import pytest

from rmq_spark.store.flush import FlushWait, GroupCommit, Housekeeper, PeriodicTask


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


def _group(log: FakeLog) -> GroupCommit:
    return GroupCommit(log.flush, lambda: log.written)


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
