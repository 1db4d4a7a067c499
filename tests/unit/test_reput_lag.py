"""The reput's lag behind the log, as each batch report and the metrics read it: counted by the
source's header walk up to the source's readable end, over segments and their BLANK tails; an
unchanged log's end judged once per report cache; damage on the way logged, never a silent
undercount."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rmq_spark.clock import ManualClock
from rmq_spark.spark.reput_progress import reput_lag
from rmq_spark.store import readable
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest
from rmq_spark.store.readable import TailCache

BODY = b"x" * (60 << 10)  # about 17 records a 1 MiB segment: 40 of them fill three


def _store(root: Path, clock: ManualClock, count: int) -> list[int]:
    """``count`` messages stored 1 s apart; their physical offsets, then the log's end."""
    offsets = []
    with MessageStore.open(StoreConfig(root_dir=root, segment_size_bytes=1 << 20), clock) as store:
        for i in range(count):
            offsets.append(store.put(PutRequest("orders", BODY, keys=(f"k{i}",))).physical_offset)
            clock.advance(1000)
        offsets.append(store.max_offset)
    return offsets


def test_the_lag_counts_every_message_to_the_end_across_segments(tmp_path: Path) -> None:
    clock = ManualClock()
    offsets = _store(tmp_path, clock, 40)
    assert offsets[39] >> 20 == 2  # three segments, two BLANK tails between them
    for index in (0, 16, 17, 18, 39, 40):
        lag = reput_lag(tmp_path, offsets[index], clock=clock)
        assert (lag.behind_messages, lag.messages_exact) == (40 - index, True)
        assert lag.behind_bytes == offsets[40] - offsets[index]
        assert lag.behind_ms == (40 - index) * 1000  # the oldest unread was stored then

    bounded = reput_lag(tmp_path, offsets[5], clock=clock, scan_messages_max=20)
    assert (bounded.behind_messages, bounded.messages_exact) == (20, False)
    exactly = reput_lag(tmp_path, offsets[20], clock=clock, scan_messages_max=20)
    assert (exactly.behind_messages, exactly.messages_exact) == (20, True)


def test_a_report_cache_judges_an_unchanged_logs_end_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock()
    offsets = _store(tmp_path, clock, 5)
    judged = []
    scan = readable._scan_and_judge
    monkeypatch.setattr(readable, "_scan_and_judge", lambda *args: judged.append(1) or scan(*args))
    cache = TailCache()
    for offset in offsets[1:3]:
        reput_lag(tmp_path, offset, clock=clock, cache=cache)
    assert len(judged) == 1

    with MessageStore.open(StoreConfig(root_dir=tmp_path, segment_size_bytes=1 << 20)) as store:
        store.put(PutRequest("orders", b"late"))
    lag = reput_lag(tmp_path, offsets[3], clock=clock, cache=cache)
    assert lag.behind_messages == 3 and len(judged) == 2
    assert len(cache.ends) == 1  # a growing log keeps one answer, not one per look


def test_damage_past_the_position_is_logged_and_the_count_a_lower_bound(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    offsets = _store(tmp_path, clock, 40)
    first_segment = tmp_path / "commitlog" / f"{0:020d}"
    with open(first_segment, "r+b") as segment:
        segment.seek(offsets[3])
        segment.write(bytes(4))  # TOTALSIZE 0: no record starts here any more

    with caplog.at_level(logging.WARNING, logger="rmq_spark.reput"):
        lag = reput_lag(tmp_path, offsets[1], clock=clock)
    assert lag.messages_exact is False  # not 38 counted as if the rest were not there
    assert lag.behind_bytes == offsets[40] - offsets[1]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(first_segment) in warning and str(offsets[3]) in warning
