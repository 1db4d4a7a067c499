"""A truncated last segment fails a Spark read loudly (it used to return fewer rows, silently)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from store_helpers import open_store, put_many, segment_paths

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    root = tmp_path_factory.mktemp("pristine")
    store = open_store(root)
    results = put_many(store, 60, body_size=150)
    store.close()
    return root, results


def test_a_whole_store_reads_every_row(spark, pristine) -> None:
    root, results = pristine
    assert spark.read.format("rocketmq").load(str(root)).count() == len(results)


@pytest.mark.parametrize("cut", ["empty", "deleted", "boundary", "mid-record", "header"])
def test_a_truncated_last_segment_fails_the_read_naming_the_file(
    spark, pristine, tmp_path: Path, cut: str
) -> None:
    source, results = pristine
    root = tmp_path / "store"
    shutil.copytree(source, root)
    last = segment_paths(root)[-1]
    victim = results[-3].physical_offset - int(last.name)
    if cut == "deleted":
        last.unlink()
    else:
        length = {"empty": 0, "boundary": victim, "mid-record": victim + 70, "header": victim + 3}
        with last.open("r+b") as handle:
            handle.truncate(length[cut])
    with pytest.raises(Exception, match="acknowledged data are missing") as info:
        spark.read.format("rocketmq").load(str(root)).count()
    assert last.name in str(info.value)
