"""ConsumeQueue recovery (docs/STORE.md, FORMAT.md 6.6): lost or torn units come back from
the CommitLog, units past the CommitLog's end are cut, damage below the flushed record is
reported with file and position and the files are left as found; kill -9 of a writer."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cq_helpers import actual_units, expected_units
from store_helpers import open_store, zero_from

from rmq_spark.clock import ManualClock
from rmq_spark.errors import ConsumeQueueCorruptError
from rmq_spark.store import cq_dispatch
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.consume_queue import CqUnit, encode_cq_unit
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR, FLUSHED_RECORD_FILE, read_flushed_record
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

WORKER = Path(__file__).with_name("kill_worker.py")
FIRST_FILE = "00000000000000000000"


def _fill(store: MessageStore, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        result = store.put(PutRequest("T", b"m%d" % i, queue_id=i % 2, tags=f"tag{i % 3}"))
        assert result.ok
    assert store.consume_queues.wait_dispatched(store.confirmed_offset, 10)


def _cq_file(root: Path, queue_id: int = 0, name: str = FIRST_FILE) -> Path:
    return root / CONSUME_QUEUE_DIR / "T" / str(queue_id) / name


def _closed_store(root: Path, count: int = 40) -> dict[tuple[str, int], dict[int, CqUnit]]:
    store = open_store(root)
    _fill(store, count)
    units = actual_units(store)
    store.close()
    return units


def test_units_the_cq_had_not_flushed_are_dispatched_again(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    _fill(store, 20)
    store.consume_queues.flush()
    flushed = read_flushed_record(tmp_path)
    assert flushed == store.max_offset
    _fill(store, 20, start=20)
    store.flush()
    store.abandon()  # like kill -9: the CQ is not flushed, its record still says `flushed`
    zero_from(_cq_file(tmp_path), 10 * 20)  # a power loss took the unflushed page of queue 0
    store = open_store(tmp_path)
    try:
        report = store.consume_queue_recovery
        assert (report.start_offset, report.rebuilt) == (flushed, False)
        assert actual_units(store) == expected_units(store)
        assert store.consume_queues.max_offset("T", 0) == 20
    finally:
        store.close()


def test_a_deleted_consumequeue_directory_is_rebuilt(tmp_path: Path) -> None:
    before = _closed_store(tmp_path)
    shutil.rmtree(tmp_path / CONSUME_QUEUE_DIR)
    store = open_store(tmp_path)
    try:
        assert store.consume_queue_recovery.rebuilt
        assert actual_units(store) == before == expected_units(store)
    finally:
        store.close()


def test_a_store_written_without_the_queue_is_rebuilt_in_pieces_with_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The first open with the queue of a store written before it existed dispatches the
    whole CommitLog: in pieces (bounded memory), logging its progress at INFO."""
    store = open_store(tmp_path, consume_queue=False)
    for i in range(60):
        assert store.put(PutRequest("T", b"m%d" % i, queue_id=i % 2, tags=f"t{i % 3}")).ok
    end = store.max_offset
    store.close()
    monkeypatch.setattr(cq_dispatch, "_SINK_RECORDS", 7)
    monkeypatch.setattr(cq_dispatch, "_PROGRESS_S", 0.0)
    caplog.set_level(logging.INFO, logger="rmq_spark.store")
    store = open_store(tmp_path)
    try:
        assert store.consume_queue_recovery.rebuilt
        assert actual_units(store) == expected_units(store)
        assert sum(len(units) for units in actual_units(store).values()) == 60
    finally:
        store.close()
    progress = [r.getMessage() for r in caplog.records if "CommitLog bytes dispatched" in r.message]
    assert len(progress) == 60 // 7
    assert progress[-1].endswith(f"of {end} CommitLog bytes dispatched")


def test_a_rebuild_keeps_the_units_already_there(tmp_path: Path) -> None:
    before = _closed_store(tmp_path)
    (tmp_path / FLUSHED_RECORD_FILE).unlink()
    store = open_store(tmp_path)
    try:
        report = store.consume_queue_recovery
        assert report.rebuilt and report.start_offset == 0 and report.truncated_units == 0
        assert actual_units(store) == before
    finally:
        store.close()


@pytest.mark.parametrize(
    "garbage",
    [b"\xff" * 13, encode_cq_unit(1 << 40, 200, 7), encode_cq_unit(1 << 40, 200, 7)[:11]],
    ids=["bad-bytes", "unit-past-the-log", "torn-unit-past-the-log"],
)
def test_a_garbage_tail_past_the_log_end_is_cut(tmp_path: Path, garbage: bytes) -> None:
    before = _closed_store(tmp_path)
    path = _cq_file(tmp_path)
    with path.open("r+b") as handle:
        handle.seek(20 * 20)  # just after queue 0's 20 units
        handle.write(garbage)
    store = open_store(tmp_path)
    try:
        assert actual_units(store) == before == expected_units(store)
        assert store.consume_queues.max_offset("T", 0) == 20
    finally:
        store.close()
    assert path.read_bytes()[20 * 20 :].count(0) == path.stat().st_size - 20 * 20


def test_units_past_the_recovered_commitlog_end_are_cut(tmp_path: Path) -> None:
    short, long = tmp_path / "short", tmp_path / "long"
    store = open_store(short)
    _fill(store, 10)
    store.close()
    shutil.copytree(short, long)
    store = open_store(long)
    _fill(store, 10, start=10)
    store.close()
    # The CommitLog of `short` with the ConsumeQueues of `long`: an ASYNC store whose CQ was
    # flushed further than its CommitLog before the power went.
    shutil.rmtree(short / CONSUME_QUEUE_DIR)
    shutil.copytree(long / CONSUME_QUEUE_DIR, short / CONSUME_QUEUE_DIR)
    store = open_store(short)
    try:
        assert store.consume_queue_recovery.truncated_units == 10
        assert actual_units(store) == expected_units(store)
        assert store.consume_queues.max_offset("T", 0) == 5
        _fill(store, 2, start=10)
        assert actual_units(store) == expected_units(store)
    finally:
        store.close()


def test_a_damaged_unit_below_the_flushed_offset_is_reported_and_kept(tmp_path: Path) -> None:
    _closed_store(tmp_path)
    path = _cq_file(tmp_path)
    with path.open("r+b") as handle:
        handle.seek(7 * 20)
        handle.write(bytes(20))  # unit 7 of 20 reads as never written
    damaged = path.read_bytes()
    with pytest.raises(ConsumeQueueCorruptError) as caught:
        open_store(tmp_path)
    assert caught.value.path == str(path)
    assert caught.value.position == 7 * 20
    assert "units 7..19 are missing or damaged" in str(caught.value)
    assert path.read_bytes() == damaged


def test_a_unit_naming_another_record_is_reported_with_file_and_position(tmp_path: Path) -> None:
    before = _closed_store(tmp_path)
    (tmp_path / FLUSHED_RECORD_FILE).unlink()  # verify every unit
    path = _cq_file(tmp_path, queue_id=1)
    unit = before[("T", 1)][5]
    with path.open("r+b") as handle:
        handle.seek(5 * 20)
        handle.write(encode_cq_unit(unit.physical_offset + 1, unit.size, unit.tags_code))
    with pytest.raises(ConsumeQueueCorruptError) as caught:
        open_store(tmp_path)
    assert (caught.value.path, caught.value.position) == (str(path), 5 * 20)
    assert f"points at physical offset {unit.physical_offset + 1}" in str(caught.value)


def test_a_file_of_the_wrong_size_is_reported(tmp_path: Path) -> None:
    _closed_store(tmp_path)
    path = _cq_file(tmp_path)
    os.truncate(path, 4096)
    with pytest.raises(ConsumeQueueCorruptError, match="expected 6000000") as caught:
        open_store(tmp_path)
    assert caught.value.path == str(path)
    for each in (tmp_path / CONSUME_QUEUE_DIR).glob("*/*/*"):
        os.truncate(each, 20_000)  # as a RocketMQ broker configured with 1000 units writes
    with pytest.raises(ConsumeQueueCorruptError, match="consume_queue_file_units = 1000"):
        open_store(tmp_path)
    store = open_store(tmp_path, consume_queue_file_units=1000)
    try:
        assert actual_units(store) == expected_units(store)
    finally:
        store.close()


def _kill_worker(root: Path, mode: str, acks_wanted: int) -> list[tuple[int, str]]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), str(root), mode, "3"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert worker.stdout is not None
    acks: list[tuple[int, str]] = []
    try:
        for line in worker.stdout:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "ACK":
                offset, _size, body = rest.split(" ", 2)
                acks.append((int(offset), body))
                if len(acks) == acks_wanted:
                    worker.send_signal(signal.SIGKILL)
        # Lines written before the kill are still in the pipe: the loop drains them.
    finally:
        worker.kill()
        worker.wait(timeout=60)
    assert worker.returncode == -signal.SIGKILL
    return acks


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["SYNC", "ASYNC"])
def test_after_kill_9_every_acknowledged_message_has_its_unit(tmp_path: Path, mode: str) -> None:
    acks = _kill_worker(tmp_path, mode, 2000)
    config = StoreConfig(
        root_dir=tmp_path, segment_size_bytes=64 * 1024, flush_policy=FlushPolicy[mode]
    )
    store = MessageStore.open(config)
    try:
        queues = store.consume_queues
        for offset, body in acks:
            record = store.read(offset)
            assert record.body.decode() == body
            [unit] = queues.units(record.topic, record.queue_id, record.queue_offset, 1)
            assert unit.physical_offset == offset
        assert actual_units(store) == expected_units(store)
        for (topic, queue_id), units in expected_units(store).items():
            assert queues.max_offset(topic, queue_id) == max(units) + 1
    finally:
        store.close()


def test_a_rebuild_after_retention_starts_each_queue_at_its_first_record(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    store = open_store(tmp_path, clock=clock, file_reserved_time_hours=1)
    _fill(store, 60)
    clock.advance(2 * 3_600_000)
    _fill(store, 4, start=60)
    assert store.delete_expired()
    expected = expected_units(store)
    store.close()
    shutil.rmtree(tmp_path / CONSUME_QUEUE_DIR)
    store = open_store(tmp_path, clock=clock, file_reserved_time_hours=1)
    try:
        assert store.consume_queue_recovery.rebuilt
        assert actual_units(store) == expected
        first = min(expected[("T", 0)])
        assert first > 0 and store.consume_queues.min_offset("T", 0) == first
        raw = _cq_file(tmp_path).read_bytes()[: first * 20]
        assert raw == encode_cq_unit(0, 0x7FFFFFFF, 0) * first  # pre-blank units
    finally:
        store.close()
