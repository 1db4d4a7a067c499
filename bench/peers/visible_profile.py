"""visible.py's profile of the reput's slowest micro-batches (PURE): where their time went.

Joins, by batch id, what the ``messages`` table says of each batch (its commit time, its rows'
oldest store time, ``visible.batch_latencies``) with the job's timeline lines
(``rmq_spark/spark/reput_timeline.py``): when Spark's trigger fired and its phases, the
writer's range look-up, data files and each Delta commit, and the maintenance chores that ran
at any moment of the batch. One batch's profile::

    {"batch_id": 41, "rows": 512, "max_ms": 1830,  # the batch's slowest row, put -> visible
     "waited_ms": 990,            # its oldest row's wait for the trigger
     "spark_ms": {"latestOffset": 3, "walCommit": 40, "queryPlanning": 12,
                  "addBatch": 760, "commitOffsets": 30, "triggerExecution": 845},
     "files_ms": 210, "commits_ms": {"consume_queue": [215, 390], ...},  # after the writer began
     "beside": ["OPTIMIZE"]}
"""

from __future__ import annotations

from typing import Any

__all__ = ["slowest_batches", "slowest_trigger"]

SPARK_PHASES = (
    "latestOffset",
    "walCommit",
    "getBatch",
    "queryPlanning",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)


def _by_kind(events: list[dict[str, Any]], kind: str) -> dict[int, dict[str, Any]]:
    return {int(e["batch_id"]): e for e in events if e.get("kind") == kind and "batch_id" in e}


def _beside(
    events: list[dict[str, Any]], start_ms: int, end_ms: int, written: dict[str, Any]
) -> list[str]:
    """The maintenance chores that ran at any moment of ``[start_ms, end_ms]``: those that
    ended (their ``maintenance`` line), and those the batch's writer saw running (its
    ``batch`` line, ``written``), as a chore still running when the job ends has no line."""
    return sorted({
        e["chore"] for e in events
        if e.get("kind") == "maintenance" and e["start_ms"] <= end_ms and e["end_ms"] >= start_ms
    } | set(written.get("beside", ())))  # fmt: skip


def _end_ms(trigger: dict[str, Any]) -> int:
    return int(trigger["start_ms"]) + int(trigger["duration_ms"].get("triggerExecution", 0))


def _profile(batch: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    trigger = _by_kind(events, "trigger").get(batch["batch_id"], {})
    written = _by_kind(events, "batch").get(batch["batch_id"], {})
    began = trigger.get("start_ms", written.get("start_ms", batch["oldest_ms"]))
    durations = trigger.get("duration_ms", {})
    return {
        **batch,
        "waited_ms": began - batch["oldest_ms"],
        "spark_ms": {name: durations[name] for name in SPARK_PHASES if name in durations},
        "files_ms": written.get("files_ms"),
        "commits_ms": written.get("commits", {}),
        "beside": _beside(events, began, batch["commit_ms"], written),
    }


def slowest_batches(
    batches: list[dict[str, Any]], events: list[dict[str, Any]], count: int = 3
) -> list[dict[str, Any]]:
    """The ``count`` batches whose slowest row took longest, each with its profile."""
    ranked = sorted(batches, key=lambda batch: batch["max_ms"], reverse=True)[:count]
    return [_profile(batch, events) for batch in ranked]


def slowest_trigger(
    events: list[dict[str, Any]], since_ms: int = 0, beside: bool = False
) -> dict[str, Any]:
    """The micro-batch that ran longest (Spark's ``triggerExecution``) of those that began at
    ``since_ms`` or later (and, with ``beside``, ran next to a maintenance chore), with what
    it did and the chores beside it; ``{}`` when there is none."""
    written = _by_kind(events, "batch")

    def chores(trigger: dict[str, Any]) -> list[str]:
        batch = written.get(int(trigger["batch_id"]), {})
        return _beside(events, trigger["start_ms"], _end_ms(trigger), batch)

    triggers = [
        e for e in events
        if e.get("kind") == "trigger" and e.get("duration_ms") and e["start_ms"] >= since_ms
        and (not beside or chores(e))
    ]  # fmt: skip
    if not triggers:
        return {}
    slowest = max(triggers, key=lambda e: e["duration_ms"].get("triggerExecution", 0))
    durations = slowest["duration_ms"]
    batch = written.get(int(slowest["batch_id"]), {})
    return {
        "batch_id": slowest["batch_id"],
        "spark_ms": {name: durations[name] for name in SPARK_PHASES if name in durations},
        "files_ms": batch.get("files_ms"),
        "commits_ms": batch.get("commits", {}),
        "beside": chores(slowest),
    }
