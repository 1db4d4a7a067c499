"""Driver-side planning (rmq_spark.spark.planner): batch ends, boundaries, timestamps, the
readable end, on logs in tmp_path."""

from __future__ import annotations

import pytest
from source_support import LogWriter, make_record

from rmq_spark.errors import CorruptRecordError, SourceError
from rmq_spark.spark import planner
from rmq_spark.store.codec import encode_record
from rmq_spark.store.view import StoreView, broker_has_store_open, read_confirm_offset

SEGMENT = 4096


@pytest.fixture
def log(tmp_path):
    writer = LogWriter(tmp_path / "store", segment_size_bytes=SEGMENT)
    writer.extend(make_record(i) for i in range(70))
    writer.set_confirm()
    return writer


def boundaries(log: LogWriter) -> list[int]:
    """Every place a batch may end: record starts and ends (a BLANK), segment starts."""
    starts = {r.physical_offset for r in log.records}
    ends = {r.physical_offset + len(encode_record(r)) for r in log.records}
    segments = set(range(0, log.end_offset, SEGMENT))
    return sorted(starts | ends | segments)


def test_one_byte_budget_advances_one_record_at_a_time_across_blanks(log):
    view = StoreView.open(log.store_dir)
    starts = [r.physical_offset for r in log.records]
    position, seen = 0, []
    while position < log.end_offset:
        following = planner.advance(view, position, log.end_offset, bytes_max=1)
        assert following > position
        assert following in boundaries(log)
        seen += [s for s in starts if position <= s < following]
        position = following
    assert seen == starts


@pytest.mark.parametrize("budget", [150, 700, 5000, 10**9])
def test_byte_budget_is_never_exceeded_when_more_than_one_record_fits(log, budget):
    view = StoreView.open(log.store_dir)
    position = 0
    while position < log.end_offset:
        following = planner.advance(view, position, log.end_offset, bytes_max=budget)
        records = [r for r in log.records if position <= r.physical_offset < following]
        assert following - position <= budget or len(records) <= 1
        assert following in boundaries(log)
        position = following


def test_a_byte_budget_the_whole_range_fits_in_reads_no_header(log, monkeypatch):
    """A catch-up whose backlog fits one batch: the batch end is the readable end, found
    without walking the backlog's headers (a walk costs ~0.25 us per message)."""
    view = StoreView.open(log.store_dir)
    walked = []
    monkeypatch.setattr(planner, "hop", lambda *args: walked.append(args) or ([], args[1]))
    assert planner.advance(view, 0, log.end_offset, bytes_max=log.end_offset) == log.end_offset
    assert walked == []


@pytest.mark.parametrize("first", [0, 1])
def test_a_byte_budget_walks_only_the_segment_it_ends_in(log, monkeypatch, first):
    """Segment starts are boundaries: the batch end is the same furthest boundary within the
    budget, found without reading the headers of the segments the budget covers whole."""
    view = StoreView.open(log.store_dir)
    start = [r.physical_offset for r in log.records][first]
    walked: list[int] = []
    units = planner._units
    monkeypatch.setattr(
        planner, "_units", lambda v, s, *rest: walked.append(s) or units(v, s, *rest)
    )
    for budget in range(400, log.end_offset - start, 97):  # more than one record fits
        walked.clear()
        got = planner.advance(view, start, log.end_offset, bytes_max=budget)
        assert got == max(b for b in boundaries(log) if b <= start + budget), budget
        last_segment = (start + budget) // SEGMENT * SEGMENT
        assert walked in ([], [max(start, last_segment)]), budget


@pytest.mark.parametrize("count", [1, 2, 13, 69, 70, 500])
def test_message_budget_counts_messages_not_blanks(log, count):
    view = StoreView.open(log.store_dir)
    following = planner.advance(view, 0, log.end_offset, records_max=count)
    taken = [r for r in log.records if r.physical_offset < following]
    assert len(taken) == min(count, 70)
    assert planner.count_records(view, 0, following, 10**6) == (len(taken), True)
    assert planner.count_records(view, 0, log.end_offset, 10) == (10, False)


def test_boundaries_accepted_as_starting_offsets(log):
    view = StoreView.open(log.store_dir)
    for offset in boundaries(log):
        planner.check_boundary(view, offset, log.end_offset)
    blank = next(
        r.physical_offset + len(encode_record(r))
        for r, n in zip(log.records, log.records[1:], strict=False)
        if n.physical_offset % SEGMENT == 0
    )
    planner.check_boundary(view, blank, log.end_offset)  # a BLANK record
    with pytest.raises(SourceError, match="not the start of a record"):
        planner.check_boundary(view, log.records[3].physical_offset + 1, log.end_offset)


def test_timestamp_search_returns_the_first_record_at_or_after(log):
    view = StoreView.open(log.store_dir)
    for record in log.records[::7]:
        ts = record.store_timestamp_ms
        assert planner.offset_for_timestamp(view, ts, 0, log.end_offset) == record.physical_offset
        assert (
            planner.offset_for_timestamp(view, ts - 1, 0, log.end_offset) == record.physical_offset
        )


def test_readable_end_is_the_confirm_offset_only_while_a_broker_has_the_store(log):
    confirm = log.records[20].physical_offset
    log.set_confirm(confirm, flushed=confirm)  # as our broker publishes
    assert read_confirm_offset(log.store_dir) == confirm
    with log.broker_running():
        assert broker_has_store_open(log.store_dir)
        assert planner.readable_end(StoreView.open(log.store_dir)) == confirm
    assert not broker_has_store_open(log.store_dir)
    assert planner.readable_end(StoreView.open(log.store_dir)) == log.end_offset


def test_a_restarted_rocketmq_brokers_stale_confirm_offset_does_not_cap_the_end(log):
    # Apache RocketMQ 5.3.3 writes its recovered end into confirmPhyOffset at a restart and
    # never moves it, leaving masterFlushedOffset at 0: the log is read to its last record.
    log.set_confirm(log.records[20].physical_offset, flushed=0)
    with log.broker_running():
        assert planner.readable_end(StoreView.open(log.store_dir)) == log.end_offset


def test_closed_store_scan_is_cached_and_resumed_as_the_log_grows(log):
    cache = planner.TailCache()
    assert planner.readable_end(StoreView.open(log.store_dir), cache) == log.end_offset
    log.extend(make_record(i) for i in range(70, 75))
    assert planner.readable_end(StoreView.open(log.store_dir), cache) == log.end_offset


def test_segment_not_starting_with_a_record_is_corrupt(log):
    last = log.segment_path(log.end_offset - log.end_offset % SEGMENT)
    data = bytearray(last.read_bytes())
    data[28] ^= 0xFF  # PHYSICALOFFSET of its first record
    last.write_bytes(bytes(data))
    # Above the durable offset a lone bad last record is one torn write; below it, damage.
    checkpoint = log.store_dir / "checkpoint"
    values = bytearray(checkpoint.read_bytes())
    values[24:32] = log.end_offset.to_bytes(8, "big")  # masterFlushedOffset
    checkpoint.write_bytes(bytes(values))
    with pytest.raises(CorruptRecordError, match="PHYSICALOFFSET.*below the durable offset"):
        planner.readable_end(StoreView.open(log.store_dir))


def test_abort_file_decides_without_proc_locks(log, tmp_path):
    missing = tmp_path / "no-such-proc-locks"
    (log.store_dir / "lock").write_text("lock")
    assert not broker_has_store_open(log.store_dir, proc_locks=missing)
    (log.store_dir / "abort").touch()
    assert broker_has_store_open(log.store_dir, proc_locks=missing)
