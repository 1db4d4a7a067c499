"""PURE: the text of our schedule journal.

The journal (``config/scheduleJournal.json``, strict JSON, ours) holds everything the
redelivery job needs to resume exactly once: the progress of every level and of the timer
queue (``QueueProgress``) and the intent of the batch being put (``Intent``). See docs/DELAY.md.

Does not own files (``progress.py``), deciding what is due (``schedule.py``) or RocketMQ's
``delayOffset.json`` (``rmq_spark.broker.config_files.rocketmq_config``, one codec for every
config file).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rmq_spark.delay.schedule import DueEntry, QueueProgress
from rmq_spark.errors import ProgressFormatError

__all__ = [
    "Intent",
    "IntentEntry",
    "JOURNAL_VERSION",
    "Journal",
    "format_journal",
    "parse_journal",
]

JOURNAL_VERSION = 1


# --- the journal ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IntentEntry:
    """One entry of the batch being put: where it came from (``kind`` "level" or "timer")."""

    kind: str
    entry: DueEntry


@dataclass(frozen=True, slots=True)
class Intent:
    """A batch about to be put, written down *before* the first put.

    ``log_offset_before`` is a CommitLog offset at or below the first byte any of these puts
    can land at; after a crash, the records from there on are compared with the batch.
    ``dequeue_ms`` is the pass time used for timer messages' TIMER_DEQUEUE_MS.
    """

    log_offset_before: int
    dequeue_ms: int
    entries: tuple[IntentEntry, ...]


@dataclass(frozen=True, slots=True)
class Journal:
    """Everything the job needs to resume exactly once (see module docstring)."""

    levels: Mapping[int, QueueProgress] = field(default_factory=dict)  # delay level -> progress
    timer: QueueProgress = QueueProgress()
    intent: Intent | None = None
    log_scan_from: int = 0  # CommitLog offset below which no schedule record is pending
    passes: int = 0  # committed batches so far (for humans)


def format_journal(journal: Journal) -> str:
    """Strict JSON, one line per top-level field."""
    intent = None
    if journal.intent is not None:
        intent = {
            "log_offset_before": journal.intent.log_offset_before,
            "dequeue_ms": journal.intent.dequeue_ms,
            "entries": [
                [
                    item.kind,
                    item.entry.queue_id,
                    item.entry.queue_offset,
                    item.entry.physical_offset,
                    item.entry.total_size,
                    item.entry.due_ms,
                    item.entry.store_timestamp_ms,
                ]
                for item in journal.intent.entries
            ],
        }
    doc: dict[str, Any] = {
        "version": JOURNAL_VERSION,
        "levels": {str(k): _queue_doc(v) for k, v in sorted(journal.levels.items())},
        "timer": _queue_doc(journal.timer),
        "log_scan_from": journal.log_scan_from,
        "passes": journal.passes,
        "intent": intent,
    }
    lines = [f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in doc.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def parse_journal(text: str) -> Journal:
    """Read the journal.

    Raises
    ------
    ProgressFormatError
        Not JSON, an unknown version, or a field of the wrong shape.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise ProgressFormatError(f"journal: not JSON: {err}") from None
    if not isinstance(doc, dict) or doc.get("version") != JOURNAL_VERSION:
        raise ProgressFormatError(f"journal: expected version {JOURNAL_VERSION}")
    try:
        levels = {_int(k, "level"): _queue_progress(v) for k, v in doc["levels"].items()}
        timer = _queue_progress(doc["timer"])
        intent = None
        if doc.get("intent") is not None:
            raw = doc["intent"]
            entries = tuple(
                IntentEntry(
                    str(kind),
                    DueEntry(
                        _int(qid, "queue_id"),
                        _int(qoff, "queue_offset"),
                        _int(phys, "physical_offset"),
                        _int(size, "total_size"),
                        _int(due, "due_ms"),
                        _int(store, "store_timestamp_ms"),
                    ),
                )
                for kind, qid, qoff, phys, size, due, store in raw["entries"]
            )
            intent = Intent(
                _int(raw["log_offset_before"], "log_offset_before"),
                _int(raw["dequeue_ms"], "dequeue_ms"),
                entries,
            )
        return Journal(
            levels,
            timer,
            intent,
            _int(doc.get("log_scan_from", 0), "log_scan_from"),
            _int(doc.get("passes", 0), "passes"),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ProgressFormatError(f"journal: bad field: {err!r}") from None


def _queue_doc(progress: QueueProgress) -> dict[str, Any]:
    return {"low_water": progress.low_water, "done_ranges": [list(r) for r in progress.done_ranges]}


def _queue_progress(doc: Any) -> QueueProgress:
    ranges = tuple((_int(a, "range"), _int(b, "range")) for a, b in doc["done_ranges"])
    for start, end in ranges:
        if end <= start:
            raise ProgressFormatError(f"journal: empty or reversed range [{start}, {end})")
    return QueueProgress(_int(doc["low_water"], "low_water"), ranges)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ProgressFormatError(f"{what}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("+-").isdigit():
            return int(text)
    raise ProgressFormatError(f"{what}: expected an integer, got {value!r}")
