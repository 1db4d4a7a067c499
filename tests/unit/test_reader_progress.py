from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmq_spark.errors import StoreMetadataError
from rmq_spark.store.reader_progress import (
    READERS_DIR,
    ReaderProgress,
    publish_reader_progress,
    read_reader_progress,
    reader_progress_path,
    remove_reader_progress,
)


def test_progress_round_trips_and_is_replaced(tmp_path: Path) -> None:
    assert read_reader_progress(tmp_path) == []
    path = publish_reader_progress(tmp_path, "reput:/data/tables", 100, 1)
    publish_reader_progress(tmp_path, "group:billing", 7, 2)
    publish_reader_progress(tmp_path, "reput:/data/tables", 4096, 3)
    assert path.parent == tmp_path / READERS_DIR
    assert json.loads(path.read_text()) == {
        "version": 1,
        "name": "reput:/data/tables",
        "physical_offset": 4096,
        "updated_at_ms": 3,
    }
    assert read_reader_progress(tmp_path) == [
        ReaderProgress("group:billing", 7, 2),
        ReaderProgress("reput:/data/tables", 4096, 3),
    ]
    assert not list(path.parent.glob("*.tmp"))


def test_names_that_clean_to_the_same_stem_get_different_files(tmp_path: Path) -> None:
    assert reader_progress_path(tmp_path, "reput:/a/b") != reader_progress_path(
        tmp_path, "reput:/a_b"
    )
    assert len(reader_progress_path(tmp_path, "reput:" + "x" * 1000).name) < 120


def test_removing_a_reader(tmp_path: Path) -> None:
    publish_reader_progress(tmp_path, "reput:/t", 5, 0)
    assert remove_reader_progress(tmp_path, "reput:/t") is True
    assert remove_reader_progress(tmp_path, "reput:/t") is False
    assert read_reader_progress(tmp_path) == []


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        '{"version": 2, "name": "r", "physical_offset": 1, "updated_at_ms": 0}',
        '{"version": 1, "name": "", "physical_offset": 1, "updated_at_ms": 0}',
        '{"version": 1, "name": "r", "physical_offset": -1, "updated_at_ms": 0}',
        '{"version": 1, "name": "r", "physical_offset": true, "updated_at_ms": 0}',
        '{"version": 1, "name": "r", "physical_offset": 1}',
    ],
)
def test_a_damaged_progress_file_is_named(tmp_path: Path, text: str) -> None:
    path = publish_reader_progress(tmp_path, "r", 1, 0)
    path.write_text(text)
    with pytest.raises(StoreMetadataError, match=path.name):
        read_reader_progress(tmp_path)
