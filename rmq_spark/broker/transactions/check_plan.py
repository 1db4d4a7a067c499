"""PURE: what one check-back scan does with each half message: one rule for the broker's
in-process check (``check.py``) and the ``rmq-spark txcheck`` job (``rmq_spark/txcheck``),
whose requests the broker judges with the same ``decide`` (``check_job.py``).

The halves from the saved progress on are walked in queue order. A half that is resolved (an
op marker or a discard names its transaction) or superseded (a later re-put of the same
transaction follows it in the scanned range) is passed; the first younger than
``timeout_ms`` (by its born time) ends the scan; one checked ``check_max`` times is
discarded; any other is renewed (re-put with TRANSACTION_CHECK_TIMES + 1 and offered to its
producers). The new progress is the first half queue offset not handled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rmq_spark.broker.transactions.records import check_times
from rmq_spark.broker.transactions.service import TxKey, key_of
from rmq_spark.store.message import MessageRecord

__all__ = [
    "CheckPlan",
    "DISCARD",
    "HalfInfo",
    "PASS",
    "RENEW",
    "Step",
    "decide",
    "half_info",
    "plan_check",
]

PASS = "pass"
DISCARD = "discard"
RENEW = "renew"


@dataclass(frozen=True, slots=True)
class HalfInfo:
    """What the rule reads of one half message."""

    key: TxKey  # (real topic, UNIQ_KEY)
    physical_offset: int
    queue_offset: int
    born_timestamp_ms: int
    check_times: int  # TRANSACTION_CHECK_TIMES


def half_info(half: MessageRecord) -> HalfInfo:
    return HalfInfo(
        key_of(half), half.physical_offset, half.queue_offset, half.born_timestamp_ms,
        check_times(half),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Step:
    action: str  # PASS, DISCARD or RENEW
    half: HalfInfo


@dataclass(frozen=True, slots=True)
class CheckPlan:
    """The steps of one scan, in queue order, and the progress after all of them (``None``:
    no half was read)."""

    steps: tuple[Step, ...]
    progress: int | None

    def of(self, action: str) -> list[HalfInfo]:
        return [step.half for step in self.steps if step.action == action]


def decide(half: HalfInfo, done: bool, now_ms: int, timeout_ms: int, check_max: int) -> str | None:
    """The action for ``half`` (``done``: resolved or superseded); ``None``: not due yet."""
    if done:
        return PASS
    if now_ms - half.born_timestamp_ms < timeout_ms:
        return None
    return DISCARD if half.check_times >= check_max else RENEW


def plan_check(
    halves: Sequence[HalfInfo],
    is_resolved: Callable[[TxKey], bool],
    now_ms: int,
    timeout_ms: int,
    check_max: int,
) -> CheckPlan:
    """One scan over ``halves`` (queue order, from the progress on; module docstring)."""
    latest = {half.key: half.queue_offset for half in halves}
    progress = halves[0].queue_offset if halves else None
    steps = []
    for half in halves:
        done = latest[half.key] != half.queue_offset or is_resolved(half.key)
        action = decide(half, done, now_ms, timeout_ms, check_max)
        if action is None:
            break
        steps.append(Step(action, half))
        progress = half.queue_offset + 1
    return CheckPlan(tuple(steps), progress)
