from __future__ import annotations

import threading
from pathlib import Path

import pytest
from store_helpers import GatedOpener, open_store, put_many, segment_paths

from rmq_spark.errors import (
    CorruptRecordError,
    OffsetOutOfRangeError,
    StoreClosedError,
    StoreLockedError,
)
from rmq_spark.store.checkpoint import read_checkpoint
from rmq_spark.store.config import FlushPolicy
from rmq_spark.store.put import PutRequest, PutStatus


def test_open_creates_the_rocketmq_layout(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    put_many(store, 1)
    assert (tmp_path / "abort").exists() and (tmp_path / "lock").exists()
    assert (tmp_path / "checkpoint").stat().st_size == 4096
    assert [p.name for p in segment_paths(tmp_path)] == ["00000000000000000000"]
    assert segment_paths(tmp_path)[0].stat().st_size == 4096
    store.close()
    assert not (tmp_path / "abort").exists()


def test_messages_survive_close_and_reopen_with_queue_offsets(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 60, queue_id=1)
    store.close()
    store = open_store(tmp_path)
    report = store.recovery_report
    assert report.clean_shutdown and report.used_snapshot and report.truncated_bytes == 0
    assert store.max_offset == results[-1].physical_offset + results[-1].total_size
    assert [store.read(r.physical_offset).queue_offset for r in results] == list(range(60))
    assert store.put(PutRequest("TopicTest", b"more", queue_id=1)).queue_offset == 60
    assert len(segment_paths(tmp_path)) > 1
    store.close()


def test_messages_never_span_two_segments(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for result in put_many(store, 80, body_size=333):
        start_segment = result.physical_offset // 4096
        end_segment = (result.physical_offset + result.total_size - 1) // 4096
        assert start_segment == end_segment
    store.close()


def test_a_second_store_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    with pytest.raises(StoreLockedError, match=str(tmp_path)):
        open_store(tmp_path)
    store.close()
    open_store(tmp_path).close()


def test_read_outside_the_log_raises(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 2)
    with pytest.raises(OffsetOutOfRangeError):
        store.read(store.max_offset)
    with pytest.raises(OffsetOutOfRangeError):
        store.read(-1)
    with pytest.raises(CorruptRecordError, match="record boundary|magic|TOTALSIZE"):
        store.read(results[1].physical_offset + 4)
    store.close()


def test_closed_store_refuses_puts_and_flushes(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.close()
    assert store.put(PutRequest("T", b"x")).status is PutStatus.SERVICE_NOT_AVAILABLE
    assert store.put_batch([PutRequest("T", b"x")])[0].status is PutStatus.SERVICE_NOT_AVAILABLE
    with pytest.raises(StoreClosedError):
        store.flush()
    store.close()  # idempotent


def test_put_batch_writes_consecutive_offsets_in_one_segment(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    put_many(store, 20)  # fill most of the first segment
    requests = [PutRequest("B", f"m{i}".encode() * 40, queue_id=i % 2) for i in range(10)]
    results = store.put_batch(requests)
    assert all(r.ok for r in results)
    assert [r.queue_offset for r in results] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    segments = {r.physical_offset // 4096 for r in results}
    assert len(segments) == 1
    for first, second in zip(results, results[1:], strict=False):
        assert second.physical_offset == first.physical_offset + first.total_size
    assert len({r.store_timestamp_ms for r in results}) == 1
    for request, result in zip(requests, results, strict=True):
        assert store.read(result.physical_offset).body == request.body
    store.close()


def test_put_batch_with_an_illegal_message_stores_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = store.put_batch([PutRequest("A", b"x"), PutRequest("bad topic", b"y")])
    assert [r.status for r in results] == [PutStatus.MESSAGE_ILLEGAL] * 2
    assert "message #1" in results[0].detail
    assert store.max_offset == 0
    store.close()


def test_put_batch_larger_than_a_segment_is_illegal(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = store.put_batch([PutRequest("A", b"x" * 900) for _ in range(5)])
    assert all(r.status is PutStatus.MESSAGE_ILLEGAL for r in results)
    store.close()


def test_put_batch_dedupes_idempotent_repeats(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    first = store.put(PutRequest("A", b"x", properties={"UNIQ_KEY": "K0"}, idempotent=True))
    requests = [
        PutRequest("A", b"x", properties={"UNIQ_KEY": "K0"}, idempotent=True),
        PutRequest("A", b"y", properties={"UNIQ_KEY": "K1"}, idempotent=True),
        PutRequest("A", b"y", properties={"UNIQ_KEY": "K1"}, idempotent=True),
    ]
    results = store.put_batch(requests)
    assert [r.duplicate for r in results] == [True, False, True]
    assert results[0].physical_offset == first.physical_offset
    assert results[2].physical_offset == results[1].physical_offset
    assert store.queue_offset("A", 0) == 2
    store.close()


def test_idempotency_window_is_rebuilt_after_reopen(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    put_many(store, 30)
    first = store.put(PutRequest("A", b"x", properties={"UNIQ_KEY": "K9"}, idempotent=True))
    put_many(store, 5)
    store.close()
    store = open_store(tmp_path)
    again = store.put(PutRequest("A", b"x", properties={"UNIQ_KEY": "K9"}, idempotent=True))
    assert again.duplicate and again.physical_offset == first.physical_offset
    store.close()


def test_sync_put_is_fsynced_and_published_before_it_returns(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC)
    result = store.put(PutRequest("A", b"x"))
    end = result.physical_offset + result.total_size
    assert store.flushed_offset >= end and store.confirmed_offset >= end
    values = read_checkpoint(tmp_path)
    assert values is not None
    assert values.confirm_phy_offset >= end and values.master_flushed_offset >= end
    assert values.physic_msg_timestamp_ms == result.store_timestamp_ms
    store.close()


def test_sync_group_commit_shares_one_fsync_among_waiting_producers(tmp_path: Path) -> None:
    opener = GatedOpener()
    store = open_store(tmp_path, opener=opener, flush_policy=FlushPolicy.SYNC)
    opener.release.clear()
    opener.fsync_entered.clear()
    leader_result: list = []
    leader = threading.Thread(target=lambda: leader_result.append(store.put(PutRequest("A", b"0"))))
    leader.start()
    assert opener.fsync_entered.wait(10)  # the leader is inside its fsync
    count_before = opener.fsync_count
    results: list = []
    followers = [
        threading.Thread(target=lambda i=i: results.append(store.put(PutRequest("A", b"%d" % i))))
        for i in range(8)
    ]
    for thread in followers:
        thread.start()
    # Every follower has written its record before the gate opens.
    while store.queue_offset("A", 0) < 9:
        threading.Event().wait(0.001)
    opener.release.set()
    for thread in [leader, *followers]:
        thread.join()
    assert all(r.ok for r in results + leader_result)
    # The leader's fsync, then one more for all eight followers.
    assert opener.fsync_count - count_before <= 2
    store.close()


def test_sync_put_times_out_with_flush_disk_timeout_and_stays_stored(tmp_path: Path) -> None:
    opener = GatedOpener()
    store = open_store(
        tmp_path, opener=opener, flush_policy=FlushPolicy.SYNC, sync_flush_timeout_ms=1
    )
    opener.release.clear()
    opener.fsync_entered.clear()
    leader = threading.Thread(target=lambda: store.put(PutRequest("A", b"lead")))
    leader.start()
    assert opener.fsync_entered.wait(10)
    follower = store.put(PutRequest("A", b"follow"))
    assert follower.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert "1 ms" in follower.detail
    opener.release.set()
    leader.join()
    assert store.read(follower.physical_offset).body == b"follow"
    store.close()


def test_async_mode_publishes_the_written_offset(tmp_path: Path) -> None:
    store = open_store(tmp_path, confirm_publish_interval_ms=1)
    results = put_many(store, 3)
    end = results[-1].physical_offset + results[-1].total_size
    assert store.confirmed_offset == end
    store.close()
    values = read_checkpoint(tmp_path)
    assert values is not None and values.confirm_phy_offset == end


def test_flush_makes_async_data_durable(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 3)
    end = results[-1].physical_offset + results[-1].total_size
    assert store.flush() == end == store.flushed_offset
    values = read_checkpoint(tmp_path)
    assert values is not None and values.master_flushed_offset == end
    store.close()


def test_put_batch_that_does_not_fit_goes_whole_into_the_next_segment(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    put_many(store, 12)  # about 2.9 KiB of the first 4 KiB segment
    end_of_first = store.max_offset
    results = store.put_batch([PutRequest("B", b"z" * 200) for _ in range(5)])
    assert all(r.ok for r in results)
    assert results[0].physical_offset == 4096
    assert all(r.physical_offset // 4096 == 1 for r in results)
    blank = store.commitlog.segments[0].read(end_of_first, 8)
    assert int.from_bytes(blank[:4], "big") == 4096 - end_of_first
    assert blank[4:] == bytes.fromhex("CBD43194")
    store.close()


def test_put_batch_mixes_topics_and_delays(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = store.put_batch(
        [
            PutRequest("A", b"1"),
            PutRequest("B", b"2", properties={"DELAY": "2"}),
            PutRequest("A", b"3"),
        ]
    )
    assert [(r.topic, r.queue_id, r.queue_offset) for r in results] == [
        ("A", 0, 0),
        ("SCHEDULE_TOPIC_XXXX", 1, 0),
        ("A", 0, 1),
    ]
    store.close()
