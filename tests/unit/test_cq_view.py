"""``CqView``: one ConsumeQueue read-only, by path, while the broker's store writes it; its
end is the broker's own (``CqQueueFiles.load``) for every shape of the last files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from store_helpers import open_store

from rmq_spark.clock import ManualClock
from rmq_spark.store.consume_queue import (
    PRE_BLANK_UNIT,
    encode_cq_unit,
    first_at_or_after,
    units_of,
    written_count,
    written_end,
)
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR, CqQueueFiles
from rmq_spark.store.cq_view import CqView, queue_dirs, queue_topics
from rmq_spark.store.put import PutRequest

FILE_UNITS = 4


def _unit(physical: int, size: int = 100) -> bytes:
    return encode_cq_unit(physical, size, 7)


def _blank() -> bytes:
    return encode_cq_unit(0, PRE_BLANK_UNIT.size, 1)[:12] + bytes(8)


def test_a_view_reads_what_the_store_dispatched_while_the_store_writes(tmp_path: Path) -> None:
    clock = ManualClock()
    store = open_store(tmp_path, clock=clock, consume_queue_file_units=FILE_UNITS)
    try:
        placed = [store.put(PutRequest("orders", b"x" * i, queue_id=i % 2)) for i in range(11)]
        queues = store.consume_queues
        assert queues.wait_dispatched(store.confirmed_offset, 10)
        assert queue_topics(tmp_path) == ["orders"]
        for queue_id, directory in queue_dirs(tmp_path, "orders").items():
            with CqView.open(directory) as view:
                assert (view.min_offset, view.max_offset) == (
                    queues.min_offset("orders", queue_id),
                    queues.max_offset("orders", queue_id),
                )
                expected = [r for r in placed if r.queue_id == queue_id]
                units = view.all_units()
                assert list(units["phys"]) == [r.physical_offset for r in expected]
                assert [view.unit(r.queue_offset) for r in expected] == [
                    (r.physical_offset, r.total_size) for r in expected
                ]
                for result in expected:
                    at = view.first_at_or_after(result.physical_offset)
                    assert at == result.queue_offset
                    stamp = view.offset_for_time(result.store_timestamp_ms, _stamps(placed))
                    assert view.physical_at(stamp) is not None
                # The broker keeps writing: the view stays the snapshot it was.
                clock.advance(5)
                store.put(PutRequest("orders", b"later", queue_id=queue_id))
                assert view.max_offset == len(expected)
                assert view.unit(view.max_offset) is None
    finally:
        store.close()


def _stamps(placed: list) -> object:
    by_offset = {r.physical_offset: r.store_timestamp_ms for r in placed}
    return by_offset.get


@pytest.mark.parametrize(
    "files",
    [
        [_unit(0) + _unit(100) + bytes(40)],
        [_unit(0) + _unit(100) + _unit(200) + _unit(300), _unit(400) + bytes(60)],
        [_unit(0) + _unit(100) + _unit(200) + _unit(300), bytes(80)],
        [_unit(0) + _unit(100) + bytes(20) + _unit(300), bytes(80)],  # a hole: the end is 2
        [_unit(0) + _unit(100) + _unit(50) + _unit(300)],  # an offset going back ends it
        [_blank() * 2 + _unit(500) + bytes(20)],  # a queue starting past 0
        [_unit(0) + _unit(100) + _unit(200) + bytes(20), _unit(900) + bytes(60)],
        [_unit(0) + encode_cq_unit(100, 1, 0)[:8] + bytes(12) + bytes(40)],  # size 0
    ],
)
def test_the_end_is_the_brokers_own_for_every_shape_of_the_last_files(
    tmp_path: Path, files: list[bytes]
) -> None:
    directory = tmp_path / CONSUME_QUEUE_DIR / "t" / "0"
    directory.mkdir(parents=True)
    for index, data in enumerate(files):
        (directory / f"{index * FILE_UNITS * 20:020d}").write_bytes(
            data.ljust(FILE_UNITS * 20, b"\0")
        )
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)  # the broker's loader may delete an empty trailing file
    broker = CqQueueFiles.load(copy, FILE_UNITS)
    try:
        with CqView.open(directory) as view:
            assert (view.min_offset, view.max_offset) == (broker.min_offset, broker.max_offset)
            count = broker.max_offset - broker.min_offset
            assert list(view.all_units()["phys"]) == [
                u.physical_offset for u in broker.units(broker.min_offset, count)
            ]
    finally:
        broker.close()


def test_a_file_retention_deletes_under_a_view_reads_as_no_units(tmp_path: Path) -> None:
    directory = tmp_path / "q" / "0"
    directory.mkdir(parents=True)
    for index in range(3):
        units = b"".join(_unit((index * FILE_UNITS + i) * 100) for i in range(FILE_UNITS))
        (directory / f"{index * FILE_UNITS * 20:020d}").write_bytes(units)
    view = CqView.open(directory)
    assert (view.min_offset, view.max_offset) == (0, 12)
    os.unlink(directory / f"{0:020d}")
    assert view.unit(1) is None
    assert len(view.units(0, 12)) == 0  # stops at the first file gone
    assert view.unit(5) == (500, 100)
    assert view.live_min(450) == 5  # the first unit still in the log
    assert CqView.open(directory, log_min_offset=450).min_offset == 5
    view.close()
    assert CqView.open(tmp_path / "nothing").max_offset == 0


def test_the_rules_of_the_unit() -> None:
    data = _unit(0) + _unit(100) + _blank() + _unit(300) + _unit(200) + bytes(20)
    assert written_count(units_of(data)) == (4, 300)
    assert written_count(units_of(_unit(100)), previous=200) == (0, 200)
    values = [None, 5, None, 9, 12]
    assert first_at_or_after(0, 5, 9, values.__getitem__) == 3
    assert first_at_or_after(0, 5, 13, values.__getitem__) == 5
    files = {4: (4, 70, True), 8: (1, 80, False), 12: (0, 80, False)}
    assert written_end([0, 4, 8], lambda base, _previous: files[base]) == (9, 8)
    assert written_end([4], lambda base, _previous: files[base]) == (8, None)
    assert written_end([], lambda base, _previous: files[base]) == (0, None)


def test_a_later_view_sees_units_written_since_and_a_recovery_cut(tmp_path: Path) -> None:
    directory = tmp_path / "q" / "0"
    directory.mkdir(parents=True)
    path = directory / f"{0:020d}"
    path.write_bytes((_unit(0) + _unit(100)).ljust(FILE_UNITS * 20, b"\0"))
    assert CqView.open(directory).max_offset == 2
    with path.open("r+b") as handle:  # the broker writes on
        handle.seek(40)
        handle.write(_unit(200))
    assert CqView.open(directory).max_offset == 3
    with path.open("r+b") as handle:  # a recovery cuts the queue back to one unit
        handle.seek(20)
        handle.write(bytes(40))
    assert CqView.open(directory).max_offset == 1
    with path.open("r+b") as handle:  # and the broker rewrites them, the last one elsewhere
        handle.seek(20)
        handle.write(_unit(100) + _unit(50))
    assert CqView.open(directory).max_offset == 2  # an offset going back ends the queue


def test_a_dropped_view_closes_its_files(tmp_path: Path) -> None:
    directory = tmp_path / "q" / "0"
    directory.mkdir(parents=True)
    (directory / f"{0:020d}").write_bytes(_unit(0).ljust(FILE_UNITS * 20, b"\0"))
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        CqView.open(directory).unit(0)
    assert len(os.listdir("/proc/self/fd")) <= before + 1
