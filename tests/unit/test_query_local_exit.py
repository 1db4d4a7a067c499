"""The JVM-free lookups (``rmq-spark query``) exit cleanly after answering.

Reading a Delta table through deltalake's own pyarrow dataset leaves pyarrow's I/O threads
calling a Python filesystem handler while the interpreter exits; on a busy machine the
process then aborts (exit 134, ``terminate called without an active exception``) after it
printed its answer, and a script checking the exit status sees a failure. Tables here are
written with deltalake (no JVM), shaped as the reput's for the columns a lookup reads.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from rmq_spark.errors import TableError
from rmq_spark.spark.query_local import _dataset, local_messages_by_key, local_messages_by_time
from rmq_spark.store.hashing import index_key_hash

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    from deltalake import write_deltalake

    stamps = pa.array([datetime(2026, 1, 1, tzinfo=UTC)] * 3, pa.timestamp("us", tz="UTC"))
    offsets = pa.array([0, 100, 200], pa.int64())
    hashes = [index_key_hash(f"orders#{key}") for key in ("k1", "k2", "k1")]
    write_deltalake(
        str(tmp_path / "message_index"),
        pa.table({"topic": ["orders"] * 3, "key": ["k1", "k2", "k1"],
                  "key_hash": pa.array(hashes, pa.int32()), "physical_offset": offsets,
                  "store_timestamp": stamps}),
    )  # fmt: skip
    write_deltalake(
        str(tmp_path / "messages"),
        pa.table({"topic": ["orders"] * 3, "physical_offset": offsets,
                  "store_timestamp": stamps, "body": [b"a", b"b", b"c"]}),
    )  # fmt: skip
    return tmp_path


def test_lookups_read_the_tables_files_from_the_local_filesystem(tables: Path) -> None:
    dataset = _dataset(tables, "messages")
    assert isinstance(dataset.filesystem, pafs.LocalFileSystem)
    assert local_messages_by_key(tables, "orders", "k1").column("body").to_pylist() == [b"a", b"c"]
    assert local_messages_by_time(tables, "orders").num_rows == 3


def test_a_missing_table_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(TableError, match="is not a Delta table"):
        _dataset(tmp_path, "messages")


def test_concurrent_lookup_processes_all_exit_zero(tables: Path) -> None:
    code = (
        "from rmq_spark.spark.query_local import local_messages_by_key as by_key;"
        f"print(by_key({str(tables)!r}, 'orders', 'k1').num_rows)"
    )

    def run(_: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
            env={"PYTHONPATH": str(ROOT)}, check=False,
        )  # fmt: skip

    with ThreadPoolExecutor(6) as pool:
        done = list(pool.map(run, range(24)))
    failed = [(d.returncode, d.stderr.strip()[-200:]) for d in done if d.returncode != 0]
    assert failed == []
    assert {d.stdout.strip() for d in done} == {"2"}
