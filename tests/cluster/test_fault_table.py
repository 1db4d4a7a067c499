"""The producer's queue choice and latency fault table (seed 003), pure, with a manual clock."""

from __future__ import annotations

import logging

import pytest

from rmq_spark.broker.cluster.fault import (
    LATENCY_MAX_MS,
    NOT_AVAILABLE_MS,
    LatencyFaultTable,
    QueueChooser,
    RoutedQueue,
)
from rmq_spark.clock import ManualClock

QUEUES = tuple(RoutedQueue("broker-a", "h:1", q) for q in range(4)) + tuple(
    RoutedQueue("broker-b", "h:2", q) for q in range(4)
)


def test_seed_003_table() -> None:
    table = LatencyFaultTable(ManualClock().monotonic_ms)
    assert LATENCY_MAX_MS == (50, 100, 550, 1000, 2000, 3000, 15000)
    assert NOT_AVAILABLE_MS == (0, 0, 30_000, 60_000, 120_000, 180_000, 600_000)
    expected = {0: 0, 49: 0, 99: 0, 549: 0, 550: 30_000, 999: 30_000, 1000: 60_000,
                2500: 120_000, 3000: 180_000, 15_000: 600_000, 99_999: 600_000}  # fmt: skip
    for latency, window in expected.items():
        assert table.not_available_ms(latency) == window, latency


def test_failed_broker_is_avoided_for_its_window_then_used_again() -> None:
    clock = ManualClock()
    table = LatencyFaultTable(clock.monotonic_ms, not_available_ms=(0, 0, 1, 2, 3, 4, 500))
    table.update("broker-a", 10, failed=True)  # a failure counts as 30 s: the last window
    assert not table.is_available("broker-a") and table.is_available("broker-b")
    chooser = QueueChooser(table)
    assert {chooser.choose(QUEUES, None).broker_name for _ in range(16)} == {"broker-b"}
    clock.advance(499)
    assert not table.is_available("broker-a")
    clock.advance(1)
    assert table.is_available("broker-a")
    assert {chooser.choose(QUEUES, None).broker_name for _ in range(16)} == {"broker-a", "broker-b"}


def test_slow_broker_window_follows_latency_and_fast_send_clears_it() -> None:
    clock = ManualClock()
    table = LatencyFaultTable(clock.monotonic_ms)
    table.update("broker-a", 600, failed=False)
    assert table.state()["broker-a"] == (600, 30_000)
    clock.advance(29_999)
    assert not table.is_available("broker-a")
    table.update("broker-a", 20, failed=False)
    assert table.is_available("broker-a")


def test_round_robin_spreads_over_every_queue_of_every_broker() -> None:
    chooser = QueueChooser()
    chosen = [chooser.choose(QUEUES, None) for _ in range(len(QUEUES) * 3)]
    assert set(chosen) == set(QUEUES)


@pytest.mark.parametrize("faults", [False, True])
def test_retry_goes_to_another_broker(faults: bool) -> None:
    chooser = QueueChooser(LatencyFaultTable(ManualClock().monotonic_ms) if faults else None)
    for _ in range(20):
        assert chooser.choose(QUEUES, "broker-a").broker_name == "broker-b"
        assert chooser.choose(QUEUES, "broker-b").broker_name == "broker-a"


def test_single_broker_route_retries_on_the_same_broker() -> None:
    only_a = QUEUES[:4]
    assert QueueChooser().choose(only_a, "broker-a").broker_name == "broker-a"


def test_every_broker_avoided_uses_the_one_that_recovers_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    table = LatencyFaultTable(clock.monotonic_ms)
    table.update("broker-a", 5000, failed=False)  # 180 s
    table.update("broker-b", 1500, failed=False)  # 60 s
    with caplog.at_level(logging.DEBUG, logger="rmq_spark.broker.cluster"):
        assert QueueChooser(table).choose(QUEUES, None).broker_name == "broker-b"
    assert "every broker avoided; using broker-b" in caplog.text


def test_state_is_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    table = LatencyFaultTable(ManualClock().monotonic_ms)
    with caplog.at_level(logging.DEBUG, logger="rmq_spark.broker.cluster"):
        table.update("broker-a", 700, failed=False)
        table.update("broker-b", 3, failed=True)
    assert "broker broker-a slow after 700 ms: avoided for 30000 ms" in caplog.text
    assert "broker broker-b failed after 3 ms: avoided for 600000 ms" in caplog.text


def test_bad_tables_are_refused() -> None:
    now = ManualClock().monotonic_ms
    with pytest.raises(ValueError, match="same, non-zero length"):
        LatencyFaultTable(now, not_available_ms=(1, 2))
    with pytest.raises(ValueError, match="ascending"):
        LatencyFaultTable(now, latency_max_ms=(5, 1), not_available_ms=(0, 0))
    with pytest.raises(ValueError, match="no queues"):
        QueueChooser().choose((), None)
