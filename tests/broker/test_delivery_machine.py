"""The delivery state machine's transitions (``consumer/delivery.py``): no I/O, no threads.

Each test drives one (group, queue) progress through pop, ack, nack, expiry, renewal, restore
and hand-off, and checks the effect it returns and what the committed offset (what a crash
leaves persisted) may pass.
"""

from __future__ import annotations

from rmq_spark.broker.consumer import delivery
from rmq_spark.broker.consumer.delivery import (
    Ask,
    CopyKind,
    Deliver,
    HandOff,
    Message,
    Outcome,
    QueueProgress,
)

_ASK = Ask(invisible_ms=10_000, retry_max_times=2)
_FIFO = Ask(invisible_ms=10_000, retry_max_times=2, fifo=True)


def _message(offset: int, group: str | None = None, prior: int = 0) -> Message:
    return Message(physical_offset=offset * 100, matches=True, message_group=group, prior=prior)


def _pop_new(progress: QueueProgress, ask: Ask = _ASK, now: int = 0, **fields: object) -> object:
    offset = progress.frontier
    assert delivery.take(progress, offset * 100, candidate=True)
    message = _message(offset, **fields)  # type: ignore[arg-type]
    return delivery.offer(progress, offset, message, ask, set(), now)


def _pop_again(progress: QueueProgress, offset: int, ask: Ask = _ASK, now: int = 0) -> object:
    assert offset in progress.deliverable(now)
    return delivery.offer(progress, offset, _message(offset), ask, set(), now)


def test_a_new_message_is_delivered_as_attempt_one_and_invisible_until_its_deadline() -> None:
    progress = QueueProgress(committed=0)
    assert _pop_new(progress, now=5) == Deliver(offset=0, attempt=1, invisible_ms=10_000)
    assert progress.deliverable(10_004) == [] and progress.deliverable(10_005) == [0]
    assert progress.next_deadline_ms() == 10_005 and progress.committed == 0


def test_a_unit_that_cannot_match_or_a_message_filtered_out_or_gone_is_done_at_once() -> None:
    progress = QueueProgress(committed=0)
    assert not delivery.take(progress, 0, candidate=False)
    assert delivery.take(progress, 100, candidate=True)
    filtered = Message(physical_offset=100, matches=False)
    assert delivery.offer(progress, 1, filtered, _ASK, set(), 0) is Outcome.DONE
    assert delivery.take(progress, 200, candidate=True)
    assert delivery.offer(progress, 2, None, _ASK, set(), 0) is Outcome.DONE
    assert progress.committed == 3 and not progress.in_flight


def test_an_ack_finishes_only_the_current_delivery() -> None:
    progress = QueueProgress(committed=0)
    _pop_new(progress)
    _pop_new(progress)
    assert not delivery.ack(progress, 1, attempt=2)  # no such delivery
    assert delivery.ack(progress, 1, attempt=1)
    assert progress.committed == 0 and progress.done == {1}  # 0 is still unacknowledged
    assert delivery.ack(progress, 0, attempt=1) and progress.committed == 2
    assert not delivery.ack(progress, 0, attempt=1)  # acknowledged already


def test_a_nack_makes_the_message_come_back_through_a_retry_copy() -> None:
    progress = QueueProgress(committed=0)
    _pop_new(progress)
    assert delivery.change_invisible(progress, 0, 1, now_ms=50, invisible_ms=0)
    hand_off = _pop_again(progress, 0, now=50)
    assert hand_off == HandOff(CopyKind.RETRY, offset=0, attempt=1, tried=1)


def test_a_message_being_handed_off_is_invisible_to_pops_and_handles_until_settled() -> None:
    progress = QueueProgress(committed=0)
    _pop_new(progress)
    hand_off = _pop_again(progress, 0, now=10_000)
    assert isinstance(hand_off, HandOff)
    assert progress.deliverable(10**9) == [] and progress.next_deadline_ms() is None
    assert not delivery.ack(progress, 0, attempt=1)  # the copy replaces that delivery
    assert not delivery.change_invisible(progress, 0, 1, 0, 0)
    # What a crash now leaves persisted: the offset still in flight, with its attempt.
    assert progress.committed == 0 and progress.snapshot()["attempts"] == {"0": 1}
    after_crash = delivery.restore(progress.committed, progress.snapshot())
    assert after_crash.deliverable(0) == [0] and after_crash.in_flight[0].attempt == 1


def test_a_copy_not_stored_leaves_the_message_deliverable_and_a_stored_one_finishes_it() -> None:
    progress = QueueProgress(committed=0)
    _pop_new(progress)
    failed = _pop_again(progress, 0, now=10_000)
    assert isinstance(failed, HandOff)
    assert delivery.settle(progress, failed, stored=False)
    assert progress.deliverable(10_000) == [0] and progress.committed == 0
    again = _pop_again(progress, 0, now=10_000)
    assert again == failed
    assert delivery.settle(progress, again, stored=True)
    assert progress.committed == 1 and not progress.in_flight
    assert not delivery.settle(progress, again, stored=True)  # settled once


def test_a_copy_settling_after_the_offset_was_reset_changes_nothing() -> None:
    progress = QueueProgress(committed=0)
    _pop_new(progress)
    hand_off = _pop_again(progress, 0, now=10_000)
    assert isinstance(hand_off, HandOff)
    reset = QueueProgress(committed=0)  # UpdateOffset replaced the queue's progress
    assert not delivery.settle(reset, hand_off, stored=True) and reset.committed == 0


def test_out_of_attempts_the_copy_is_a_dead_letter() -> None:
    progress = QueueProgress(committed=0)
    assert _pop_new(progress, prior=3) == HandOff(CopyKind.DLQ, offset=0, attempt=0, tried=3)
    progress = QueueProgress(committed=0)
    assert _pop_new(progress, prior=2) == Deliver(0, 1, 10_000)  # its third attempt
    expired = delivery.offer(progress, 0, _message(0, prior=2), _ASK, set(), 10_000)
    assert expired == HandOff(CopyKind.DLQ, 0, attempt=1, tried=3)


def test_a_fifo_group_redelivers_in_place_and_holds_the_message_group_behind_it() -> None:
    progress = QueueProgress(committed=0)
    assert _pop_new(progress, _FIFO, group="g") == Deliver(0, 1, 10_000)
    blocked = progress.blocked_groups(0)
    assert blocked == {"g"}
    delivery.take(progress, 100, candidate=True)
    assert delivery.offer(progress, 1, _message(1, "g"), _FIFO, blocked, 0) is Outcome.HELD
    assert delivery.offer(progress, 0, _message(0, "g"), _FIFO, set(), 10_000) == Deliver(
        0, 2, 10_000
    )


def test_a_fifo_message_out_of_attempts_blocks_its_group_while_its_dead_letter_is_stored() -> None:
    progress = QueueProgress(committed=0)
    blocked: set[str] = set()
    delivery.take(progress, 0, candidate=True)
    dead = delivery.offer(progress, 0, _message(0, "g", prior=3), _FIFO, blocked, 0)
    assert dead == HandOff(CopyKind.DLQ, 0, attempt=0, tried=3) and blocked == {"g"}
    assert progress.blocked_groups(10**9) == {"g"}
    assert isinstance(dead, HandOff) and delivery.settle(progress, dead, stored=True)
    assert progress.blocked_groups(10**9) == set() and progress.committed == 1


def test_without_copies_a_message_that_came_back_is_delivered_again() -> None:
    progress = QueueProgress(committed=0)
    ask = Ask(invisible_ms=10_000, retry_max_times=2, copies=False)
    _pop_new(progress, ask)
    assert _pop_again(progress, 0, ask, now=10_000) == Deliver(0, 2, 10_000)


def test_auto_renewed_deliveries_stay_invisible_while_their_client_lives() -> None:
    progress = QueueProgress(committed=0)
    ask = Ask(invisible_ms=0, retry_max_times=2, auto_renew=True, client_id="c1")
    assert _pop_new(progress, ask) == Deliver(0, 1, delivery.RENEW_MS)
    delivery.renew(progress, delivery.RENEW_MS, alive=lambda client: client == "c1")
    assert progress.deliverable(delivery.RENEW_MS) == []
    delivery.renew(progress, 2 * delivery.RENEW_MS, alive=lambda _client: False)
    assert progress.deliverable(2 * delivery.RENEW_MS) == [0]


def test_a_client_saying_goodbye_releases_its_auto_renewed_deliveries() -> None:
    progress = QueueProgress(committed=0)
    ask = Ask(invisible_ms=0, retry_max_times=2, auto_renew=True, client_id="c1")
    _pop_new(progress, ask)
    _pop_new(progress)
    assert delivery.release(progress, "c1", deadline_ms=1_000) == 1
    assert progress.deliverable(1_000) == [0]
    assert delivery.release(progress, "c1", deadline_ms=1_000) == 0
