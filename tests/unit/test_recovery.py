from __future__ import annotations

import json
from pathlib import Path

from store_helpers import open_store, put_many

from rmq_spark.store.checkpoint import SNAPSHOT_FILE
from rmq_spark.store.put import PutRequest
from rmq_spark.store.reader import iter_records, open_read_only, verify_log


def test_empty_store_recovers_to_offset_zero(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    report = store.recovery_report
    assert (report.end_offset, report.record_count, report.truncated_bytes) == (0, 0, 0)
    assert (store.min_offset, store.max_offset) == (0, 0)
    store.close()


def test_queue_offsets_are_rebuilt_from_records_without_a_snapshot(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    put_many(store, 7, topic="A", queue_id=1)
    put_many(store, 3, topic="B", queue_id=0)
    store.close()
    (tmp_path / SNAPSHOT_FILE).unlink()
    store = open_store(tmp_path)
    assert not store.recovery_report.used_snapshot
    assert store.recovery_report.record_count == 10
    assert (store.queue_offset("A", 1), store.queue_offset("B", 0)) == (7, 3)
    store.close()


def test_a_snapshot_that_does_not_match_the_log_is_ignored(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 5)
    store.close()
    path = tmp_path / SNAPSHOT_FILE
    outer = json.loads(path.read_text())
    snapshot = outer["snapshot"]
    snapshot["last_record_offset"] = results[1].physical_offset  # does not end at the offset
    body = json.dumps(snapshot, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    import zlib

    outer["crc"] = zlib.crc32(body.encode())
    path.write_text(json.dumps(outer))
    store = open_store(tmp_path)
    assert not store.recovery_report.used_snapshot
    assert store.queue_offset("TopicTest", 0) == 5
    store.close()


def test_clean_restart_with_the_window_off_scans_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path, idempotency_window_messages=0)
    put_many(store, 20)
    store.close()
    store = open_store(tmp_path, idempotency_window_messages=0)
    report = store.recovery_report
    assert report.used_snapshot and report.record_count == 0
    assert report.start_offset == report.end_offset == store.max_offset
    store.close()


def test_iter_records_walks_across_segments_in_order(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 40, body_size=150)
    store.close()
    commitlog = open_read_only(tmp_path)
    try:
        offsets = [d.position for d in iter_records(commitlog)]
        assert offsets == [r.physical_offset for r in results]
        assert len(commitlog.segments) > 1
        tail = [d.position for d in iter_records(commitlog, results[30].physical_offset)]
        assert tail == offsets[30:]
        bounded = list(iter_records(commitlog, None, results[3].physical_offset))
        assert len(bounded) == 3
        result = verify_log(commitlog)
        assert result.error is None and result.record_count == 40
    finally:
        commitlog.close()


def test_verify_reports_a_missing_blank_before_the_next_segment(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 40, body_size=150)
    store.close()
    first = tmp_path / "commitlog" / "00000000000000000000"
    in_first = [r for r in results if r.physical_offset < 4096]
    end = in_first[-1].physical_offset + in_first[-1].total_size
    data = bytearray(first.read_bytes())
    data[end : end + 8] = bytes(8)  # the BLANK record is gone
    first.write_bytes(bytes(data))
    commitlog = open_read_only(tmp_path)
    try:
        result = verify_log(commitlog)
    finally:
        commitlog.close()
    assert result.error is not None and result.error.position == end
    assert "BLANK" in result.error.reason


def test_recovered_store_accepts_puts_where_the_log_ended(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    put_many(store, 13, body_size=200)
    store.close()
    store = open_store(tmp_path)
    result = store.put(PutRequest("TopicTest", b"y" * 900))
    assert result.ok and result.queue_offset == 13
    assert result.physical_offset // 4096 == (result.physical_offset + result.total_size) // 4096
    assert store.read(result.physical_offset).body == b"y" * 900
    store.close()
