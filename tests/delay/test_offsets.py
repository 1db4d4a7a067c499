"""PURE progress format: our journal (delayOffset.json: tests/unit/test_fastjson.py)."""

from __future__ import annotations

import pytest

from rmq_spark.delay.offsets import (
    Intent,
    IntentEntry,
    Journal,
    format_journal,
    parse_journal,
)
from rmq_spark.delay.schedule import DueEntry, QueueProgress
from rmq_spark.errors import ProgressFormatError


def test_journal_round_trips_with_an_intent() -> None:
    journal = Journal(
        levels={1: QueueProgress(4, ((6, 9),)), 3: QueueProgress(0)},
        timer=QueueProgress(2, ((5, 6),)),
        intent=Intent(
            4096,
            1_700_000_000_123,
            (
                IntentEntry("level", DueEntry(0, 4, 100, 200, 1_700_000_000_000, 99)),
                IntentEntry("timer", DueEntry(0, 3, 300, 210, 1_700_000_000_100, 98)),
            ),
        ),
        log_scan_from=77,
        passes=12,
    )
    assert parse_journal(format_journal(journal)) == journal
    assert parse_journal(format_journal(Journal())) == Journal()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        '{"version": 99}',
        '{"version": 1}',
        '{"version": 1, "levels": {"x": {"low_water": 0, "done_ranges": []}}, '
        '"timer": {"low_water": 0, "done_ranges": []}}',
        '{"version": 1, "levels": {}, "timer": {"low_water": 0, "done_ranges": [[5, 5]]}}',
    ],
)
def test_parse_journal_rejects_bad_text(text: str) -> None:
    with pytest.raises(ProgressFormatError):
        parse_journal(text)
