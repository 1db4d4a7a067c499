"""Pure pieces of the consume path: receipt handles, one queue's progress, the long poll."""

from __future__ import annotations

from typing import Any

import pytest

from rmq_spark.broker.consumer.delivery import InFlight, QueueProgress
from rmq_spark.broker.consumer.receipt import ReceiptHandle, decode_receipt_handle
from rmq_spark.broker.consumer.waiters import long_poll


def test_a_receipt_handle_is_rocketmqs_nine_fields_plus_attempt_and_nonce() -> None:
    handle = ReceiptHandle(
        broker_name="broker-a",
        queue_id=3,
        queue_offset=42,
        physical_offset=8192,
        retrieve_ms=1_700_000_000_000,
        invisible_ms=30_000,
        attempt=2,
        nonce="9f8e7d6c",
        topic_type=ReceiptHandle.topic_type_of("%RETRY%g"),
    )
    text = handle.encode()
    fields = text.split(" ")
    # ReceiptHandle.decode (Java) reads these positions and ignores the rest.
    assert fields[:9] == ["42", "1700000000000", "30000", "0", "1", "broker-a", "3", "42", "8192"]
    assert decode_receipt_handle(text) == handle
    assert handle.deadline_ms == 1_700_000_030_000


def test_text_that_is_not_one_of_our_handles_says_why() -> None:
    assert "fields" in str(decode_receipt_handle("garbage"))
    assert "non-numeric" in str(decode_receipt_handle("a b c d 0 broker-a 0 0 0 1 ff"))
    assert "negative" in str(decode_receipt_handle("0 1 2 0 0 broker-a -1 0 0 1 ff"))


def _deliver(progress: QueueProgress, offset: int, deadline_ms: int = 100) -> None:
    progress.take_new(offset)
    progress.deliver(offset, InFlight(1, deadline_ms, offset * 100))


def test_the_committed_offset_never_passes_an_unacknowledged_message() -> None:
    progress = QueueProgress(committed=10)
    for offset in range(10, 15):
        _deliver(progress, offset)
    progress.finish(11)
    progress.finish(13)
    assert progress.committed == 10 and progress.done == {11, 13}
    progress.finish(10)
    assert progress.committed == 12 and progress.done == {13}
    progress.finish(12)
    assert progress.committed == 14 and not progress.done
    assert progress.deliverable(now_ms=99) == [] and progress.deliverable(now_ms=100) == [14]


def test_after_a_restart_acknowledged_stay_done_and_in_flight_keep_their_attempts() -> None:
    before = QueueProgress(committed=0)
    for offset in range(5):
        _deliver(before, offset)
    before.in_flight[3].attempt = 4
    before.finish(1)
    before.finish(4)
    after = QueueProgress.restore(before.committed, before.snapshot())
    assert after.committed == 0 and after.done == {1, 4} and after.frontier == 5
    assert {o: f.attempt for o, f in after.in_flight.items()} == {0: 1, 2: 1, 3: 4}
    assert after.deliverable(now_ms=0) == [0, 2, 3]  # deadlines do not survive a restart


def test_a_queue_shortened_by_retention_moves_the_progress_up() -> None:
    progress = QueueProgress(committed=0)
    for offset in range(4):
        _deliver(progress, offset)
    progress.clamp(min_offset=2)
    assert progress.committed == 2 and sorted(progress.in_flight) == [2, 3]


def _poll(wait_s: float, times: list[float]) -> Any:
    clock = iter(times)
    steps = long_poll(wait_s, lambda: next(clock))
    assert next(steps) == 0.0
    return steps


def test_the_long_poll_answers_at_once_when_a_pop_found_something() -> None:
    steps = _poll(5.0, [100.0, 100.1])
    with pytest.raises(StopIteration) as answer:
        steps.send((["m"], False))
    assert answer.value.value == ["m"]


def test_the_long_poll_waits_what_is_left_then_answers_empty_at_its_deadline() -> None:
    steps = _poll(5.0, [100.0, 101.0, 104.5, 105.0])
    assert steps.send(([], False)) == 4.0
    assert steps.send(([], False)) == 0.5
    with pytest.raises(StopIteration) as answer:
        steps.send(([], False))
    assert answer.value.value == []


def test_the_long_poll_ends_when_the_broker_stops() -> None:
    steps = _poll(5.0, [100.0, 101.0])
    with pytest.raises(StopIteration) as answer:
        steps.send(([], True))
    assert answer.value.value == []
