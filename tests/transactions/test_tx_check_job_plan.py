"""The check-back's one rule (``check_plan.plan_check``), shared by the broker's in-process
check and the txcheck job: resolved and superseded halves are passed, the first half not yet
due ends the scan (the progress stays there), a half checked ``check_max`` times is
discarded, any other is renewed."""

from __future__ import annotations

from rmq_spark.broker.transactions.check_plan import (
    DISCARD,
    PASS,
    RENEW,
    HalfInfo,
    decide,
    plan_check,
)


def _half(key: str, queue_offset: int, born_ms: int = 0, checks: int = 0) -> HalfInfo:
    return HalfInfo(("orders", key), 1000 + queue_offset, queue_offset, born_ms, checks)


def test_a_scan_passes_discards_renews_and_stops_at_the_first_half_not_due() -> None:
    halves = [
        _half("done", 10),  # resolved
        _half("again", 11),  # superseded by its re-put at 14
        _half("tired", 12, checks=3),
        _half("open", 13, checks=1),
        _half("again", 14, checks=1),
        _half("young", 15, born_ms=9_500),
        _half("late", 16),  # after the young one: next scan
    ]
    plan = plan_check(halves, lambda key: key[1] == "done", 10_000, 1000, 3)
    actions = [(step.action, step.half.queue_offset) for step in plan.steps]
    assert actions == [(PASS, 10), (PASS, 11), (DISCARD, 12), (RENEW, 13), (RENEW, 14)]
    assert plan.progress == 15
    assert [h.queue_offset for h in plan.of(RENEW)] == [13, 14]


def test_an_empty_or_young_scan_keeps_the_progress() -> None:
    assert plan_check([], lambda key: False, 0, 1, 1).progress is None
    young = plan_check([_half("young", 7, born_ms=100)], lambda key: False, 150, 1000, 3)
    assert young.steps == () and young.progress == 7


def test_one_half_as_the_broker_judges_a_jobs_request() -> None:
    half = _half("h", 3, born_ms=0, checks=2)
    assert decide(half, True, 10_000, 1000, 3) == PASS
    assert decide(half, False, 500, 1000, 3) is None
    assert decide(half, False, 10_000, 1000, 3) == RENEW
    assert decide(half, False, 10_000, 1000, 2) == DISCARD
