"""Progress files on disk: journal, delayOffset.json (+ .bak), the job lock."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_spark.broker.config_files.rocketmq_config import decode_delay_offsets
from rmq_spark.delay.offsets import Journal
from rmq_spark.delay.progress import ProgressFiles
from rmq_spark.delay.schedule import QueueProgress
from rmq_spark.errors import ProgressFormatError, ScheduleLockedError, StoreLockedError


def test_journal_survives_a_reopen(tmp_path: Path) -> None:
    files = ProgressFiles(tmp_path)
    files.lock()
    journal = Journal(levels={2: QueueProgress(7)}, timer=QueueProgress(1, ((3, 4),)))
    files.save(journal)
    files.unlock()
    assert ProgressFiles(tmp_path).load() == journal


def test_writing_without_the_lock_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreLockedError):
        ProgressFiles(tmp_path).save(Journal())


def test_a_second_job_cannot_take_the_lock(tmp_path: Path) -> None:
    first = ProgressFiles(tmp_path)
    first.lock()
    with pytest.raises(ScheduleLockedError, match="another redelivery job"):
        ProgressFiles(tmp_path).lock()
    first.unlock()
    second = ProgressFiles(tmp_path)
    second.lock()
    second.unlock()


def test_delay_offsets_keep_the_previous_content_in_bak(tmp_path: Path) -> None:
    files = ProgressFiles(tmp_path)
    files.lock()
    files.save_delay_offsets({1: 3, 2: 0}, now_ms=1000)
    files.save_delay_offsets({1: 5, 2: 1}, now_ms=2000)
    main = (tmp_path / "config" / "delayOffset.json").read_text()
    bak = (tmp_path / "config" / "delayOffset.json.bak").read_text()
    assert "{1:5,2:1\n\t}" in main and '"counter":2' in main
    assert decode_delay_offsets(bak)[0] == {1: 3, 2: 0}


@pytest.mark.parametrize("damage", ["", "{garbage", None])
def test_load_falls_back_to_bak_when_delay_offset_json_is_unusable(
    tmp_path: Path, damage: str | None
) -> None:
    files = ProgressFiles(tmp_path)
    files.lock()
    files.save_delay_offsets({1: 3}, now_ms=1000)
    files.save_delay_offsets({1: 9}, now_ms=2000)
    main = tmp_path / "config" / "delayOffset.json"
    if damage is None:
        main.unlink()
    else:
        main.write_text(damage)
    assert files.load_delay_offsets() == {1: 3}


def test_a_delay_offset_json_ahead_of_the_journal_raises_the_low_water_mark(tmp_path: Path) -> None:
    files = ProgressFiles(tmp_path)
    files.lock()
    files.save(Journal(levels={1: QueueProgress(2, ((4, 6),)), 2: QueueProgress(8)}))
    (tmp_path / "config" / "delayOffset.json").write_text('{"offsetTable":{1:5,2:3,3:4}}')
    loaded = files.load()
    assert loaded.levels[1] == QueueProgress(6)
    assert loaded.levels[2] == QueueProgress(8)
    assert loaded.levels[3] == QueueProgress(4)


def test_a_rocketmq_store_without_journal_starts_from_delay_offset_json(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "delayOffset.json").write_text('{\n\t"offsetTable":{1:1,2:0\n\t}\n}')
    loaded = ProgressFiles(tmp_path).load()
    assert loaded.levels[1] == QueueProgress(1)
    assert loaded.levels.get(2, QueueProgress()) == QueueProgress(0)
    assert loaded.intent is None


def test_an_unreadable_journal_stops_the_job_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "scheduleJournal.json").write_text("{not json")
    with pytest.raises(ProgressFormatError, match="scheduleJournal.json"):
        ProgressFiles(tmp_path).load()
