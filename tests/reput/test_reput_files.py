"""The reput's data files: written from Arrow, committed once, and skipped by Delta's stats."""

from __future__ import annotations

import json
import random
import threading
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rmq_spark.errors import SchemaMismatchError, TableError
from rmq_spark.spark.delta_append import commit_files_once
from rmq_spark.spark.delta_files import DataFileWriter
from rmq_spark.spark.reput_files import FILE_SCHEMAS, file_schema_json
from rmq_spark.spark.tables import (
    CONSUME_QUEUE,
    MESSAGE_INDEX,
    TABLE_DDL,
    ensure_tables,
    table_path,
)

BASE_S = 1_700_000_000


def _queue_rows(first: int, count: int) -> pa.Table:
    rows = [
        {
            "topic": "T",
            "queue_id": 0,
            "queue_offset": offset,
            "physical_offset": offset * 100,
            "total_size": 100,
            "tags_code": offset,
            "store_timestamp": datetime.fromtimestamp(BASE_S + offset, UTC),
        }
        for offset in range(first, first + count)
    ]
    return pa.Table.from_pylist(rows, schema=FILE_SCHEMAS[CONSUME_QUEUE])


def _file(directory: Path, rows: pa.Table, name: str = CONSUME_QUEUE) -> dict:
    writer = DataFileWriter(directory, FILE_SCHEMAS[name])
    writer.write(rows)
    add = writer.close()
    assert add is not None
    return add


def test_a_file_carries_delta_stats_and_long_strings_get_no_bounds(tmp_path: Path) -> None:
    add = _file(tmp_path, _queue_rows(5, 10))
    stats = json.loads(add["stats"])
    assert stats["numRecords"] == 10
    assert stats["minValues"]["queue_offset"] == 5 and stats["maxValues"]["queue_offset"] == 14
    assert stats["minValues"]["store_timestamp"] == "2023-11-14T22:13:25.000Z"
    assert stats["nullCount"] == dict.fromkeys(FILE_SCHEMAS[CONSUME_QUEUE].names, 0)
    assert add["size"] == (tmp_path / add["path"]).stat().st_size

    long_key = "k" * 33
    index = pa.Table.from_pylist(
        [
            {
                "topic": "T",
                "key": key,
                "key_type": "KEYS",
                "key_hash": 1,
                "physical_offset": 0,
                "store_timestamp": datetime.fromtimestamp(BASE_S, UTC),
            }
            for key in ("a", long_key)
        ],
        schema=FILE_SCHEMAS[MESSAGE_INDEX],
    )
    stats = json.loads(_file(tmp_path, index, MESSAGE_INDEX)["stats"])
    assert "key" not in stats["minValues"] and "key" not in stats["maxValues"]
    assert stats["minValues"]["topic"] == "T"


_MIXED = pa.schema(
    [
        pa.field("tiny", pa.int8()),
        pa.field("small", pa.int16()),
        pa.field("id", pa.int32()),
        pa.field("offset", pa.int64(), False),
        pa.field("tags", pa.list_(pa.int64())),  # nested, before the columns it must not shadow
        pa.field("name", pa.string()),
        pa.field("body", pa.binary()),
        pa.field("at_ms", pa.timestamp("ms", tz="UTC")),
        pa.field("at_us", pa.timestamp("us", tz="UTC")),
    ]
)
_TEXTS = ["", "a", "B", "\u00e9", "\uffff", "\U00010000", "z" * 32, "y" * 33, "T\u00e9st"]


def _mixed_rows(seed: int, count: int, all_null: bool) -> pa.Table:
    rng = random.Random(seed)

    def value(make):  # noqa: ANN001, ANN202
        return None if all_null or rng.random() < 0.2 else make()

    columns = {
        "tiny": [value(lambda: rng.randint(-128, 127)) for _ in range(count)],
        "small": [value(lambda: rng.randint(-(2**15), 2**15 - 1)) for _ in range(count)],
        "id": [value(lambda: rng.randint(-(2**31), 2**31 - 1)) for _ in range(count)],
        "offset": [rng.randint(-(2**63), 2**63 - 1) for _ in range(count)],
        "tags": [value(lambda: [rng.randint(0, 9)]) for _ in range(count)],
        "name": [value(lambda: rng.choice(_TEXTS)) for _ in range(count)],
        "body": [value(lambda: rng.randbytes(3)) for _ in range(count)],
        "at_ms": [value(lambda: rng.randint(0, 2**41)) for _ in range(count)],
        "at_us": [value(lambda: rng.randint(0, 2**41) * 1000) for _ in range(count)],
    }
    return pa.table(
        {name: pa.array(values, _MIXED.field(name).type) for name, values in columns.items()},
        schema=_MIXED,
    )


def _oracle_stats(table: pa.Table) -> dict:
    """Delta's stats of ``table`` computed the slow, obvious way from its Python values."""
    low: dict = {}
    high: dict = {}
    for name in ("tiny", "small", "id", "offset", "name", "at_ms", "at_us"):
        values = [v for v in table.column(name).to_pylist() if v is not None]
        if not values:
            continue
        if name.startswith("at_"):
            values = [
                v.strftime("%Y-%m-%dT%H:%M:%S.") + f"{v.microsecond // 1000:03d}Z" for v in values
            ]
        if name == "name" and max(len(min(values)), len(max(values))) > 32:
            continue
        low[name], high[name] = min(values), max(values)
    nulls = {name: table.column(name).null_count for name in table.column_names}
    return {"numRecords": table.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls}


@pytest.mark.parametrize("seed", range(8))
def test_file_stats_over_row_groups_are_the_rows_bounds(tmp_path: Path, seed: int) -> None:
    """Several row groups (one all null), nulls, non-ASCII and long strings, nested columns:
    the file's stats are the bounds of the rows read back from it."""
    writer = DataFileWriter(tmp_path, _MIXED)
    for group, count in enumerate((7, 1, 30, 5)):
        writer.write(_mixed_rows(seed * 10 + group, count, all_null=group == 1))
    add = writer.close()
    assert add is not None
    written = pq.read_table(tmp_path / add["path"])
    assert json.loads(add["stats"]) == _oracle_stats(written)


def test_an_empty_writer_leaves_no_file_and_abandon_removes_one(tmp_path: Path) -> None:
    empty = DataFileWriter(tmp_path, FILE_SCHEMAS[CONSUME_QUEUE])
    empty.write(_queue_rows(0, 0))
    assert empty.close() is None and list(tmp_path.iterdir()) == []
    failed = DataFileWriter(tmp_path, FILE_SCHEMAS[CONSUME_QUEUE])
    failed.write(_queue_rows(0, 3))
    failed.abandon()
    assert list(tmp_path.iterdir()) == []


def test_a_null_in_a_not_null_column_is_refused(tmp_path: Path) -> None:
    rows = _queue_rows(0, 2).set_column(
        0, pa.field("topic", pa.string()), pa.array(["T", None], pa.string())
    )
    with pytest.raises(TableError, match="topic is NOT NULL"):
        DataFileWriter(tmp_path, FILE_SCHEMAS[CONSUME_QUEUE]).write(rows)


def _files_read(frame) -> int:  # noqa: ANN001
    """Rows of ``frame`` are collected; returns how many data files Delta's scan read."""
    frame.collect()
    plan = frame._jdf.queryExecution().executedPlan()
    if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec":
        plan = plan.executedPlan()
    leaves = plan.collectLeaves().iterator()
    read = 0
    while leaves.hasNext():
        metric = leaves.next().metrics().get("numFiles")
        read += int(metric.get().value()) if metric.isDefined() else 0
    return read


@pytest.mark.spark
def test_files_commit_once_and_delta_skips_by_their_stats(spark, tmp_path: Path) -> None:
    ensure_tables(spark, tmp_path)
    path = str(table_path(tmp_path, CONSUME_QUEUE))
    adds = [_file(Path(path), _queue_rows(0, 10)), _file(Path(path), _queue_rows(10, 10))]
    schema = file_schema_json(CONSUME_QUEUE)
    commit = {"schema_json": schema, "app_id": "reput", "metadata": {"batch_id": 0}}
    assert commit_files_once(spark, path, adds, version=2000, **commit) == 20
    assert commit_files_once(spark, path, adds, version=2000, **commit) is None  # a replay
    assert commit_files_once(spark, path, [], version=1000, **commit) is None  # older

    table = spark.read.format("delta").load(path)
    assert table.count() == 20
    assert _files_read(table.where("queue_offset = 15")) == 1
    assert _files_read(table.where(f"store_timestamp < timestamp_seconds({BASE_S + 3})")) == 1
    assert _files_read(table.where("tags_code >= 0")) == 2


@pytest.mark.spark
def test_file_schemas_are_the_tables_schemas(spark, tmp_path: Path) -> None:
    from pyspark.sql.pandas.types import from_arrow_schema

    for name, schema in FILE_SCHEMAS.items():
        expected = spark.createDataFrame([], TABLE_DDL[name]).schema.simpleString()
        assert from_arrow_schema(schema).simpleString() == expected, name
    ensure_tables(spark, tmp_path)
    path = str(table_path(tmp_path, CONSUME_QUEUE))
    with pytest.raises(SchemaMismatchError, match="do not match its schema"):
        commit_files_once(
            spark,
            path,
            [],
            schema_json=file_schema_json(MESSAGE_INDEX),
            app_id="reput",
            version=1,
            metadata={},
        )


@pytest.mark.spark
def test_a_concurrent_commit_of_the_same_app_and_version_leaves_ours_out(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What exactly-once rests on, and what a Delta upgrade could change under Delta's
    internal transaction API without a compile error: another writer of the same app id that
    commits the same version between our version check and our commit takes the version;
    ours then finds it committed and adds nothing (no row twice)."""
    from rmq_spark.spark import delta_append

    ensure_tables(spark, tmp_path)
    path = str(table_path(tmp_path, CONSUME_QUEUE))
    commit = {"schema_json": file_schema_json(CONSUME_QUEUE), "app_id": "reput", "metadata": {}}
    checked = delta_append._txn_version
    raced: list[int] = []

    def racing(txn: object, app_id: str) -> int:
        version = checked(txn, app_id)
        if not raced:  # the other writer, between our check and our commit
            raced.append(1)
            assert commit_files_once(spark, path, [], version=6, **commit) == 0
        return version

    monkeypatch.setattr(delta_append, "_txn_version", racing)
    adds = [_file(Path(path), _queue_rows(0, 10))]
    assert commit_files_once(spark, path, adds, version=6, **commit) is None
    assert spark.read.format("delta").load(path).count() == 0
    assert delta_append.committed_txn_version(spark, path, "reput") == 6


def _two_small_files(spark, tables: Path) -> tuple[str, dict]:  # noqa: ANN001
    ensure_tables(spark, tables)
    path = str(table_path(tables, CONSUME_QUEUE))
    commit = {"schema_json": file_schema_json(CONSUME_QUEUE), "app_id": "reput", "metadata": {}}
    for version, first in ((1, 0), (2, 10)):
        adds = [_file(Path(path), _queue_rows(first, 10))]
        assert commit_files_once(spark, path, adds, version=version, **commit) == 10
    return path, commit


def _optimize_with_a_late_checksum(spark, path: str, held_s: float = 0.3) -> threading.Thread:  # noqa: ANN001
    """OPTIMIZE on a DeltaLog of its own (as the reput's maintenance runs it), its version's
    checksum then held back for ``held_s``: the moment between another writer's commit and its
    checksum. Returns the thread that puts the checksum back."""
    from delta.tables import DeltaTable

    from rmq_spark.spark.tables import _OWN_DELTA_LOG

    DeltaTable.forPath(spark, path, _OWN_DELTA_LOG).optimize().executeCompaction()
    log_dir = Path(path) / "_delta_log"
    newest = max(log_dir.glob("*.json"))
    assert '"operation":"OPTIMIZE"' in newest.read_text()
    crc = newest.with_suffix(".crc")
    held = crc.read_bytes()
    crc.unlink()
    restore = threading.Timer(held_s, crc.write_bytes, args=(held,))
    restore.start()
    return restore


def _jobs_of(spark, group: str, call):  # noqa: ANN001, ANN202
    """``call()``'s result and how many Spark jobs it ran (in this thread)."""
    context = spark.sparkContext
    context.setJobGroup(group, group)
    try:
        result = call()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    return result, len(context.statusTracker().getJobIdsForGroup(group))


@pytest.mark.spark
def test_a_commit_after_another_writers_commit_derives_its_checksum_not_a_state_rebuild(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our snapshot is OPTIMIZE's version before its checksum is written (its process paused
    or starved): the commit writes that checksum itself, Delta's incremental derivation from
    the version before's, the same one OPTIMIZE writes, without waiting for OPTIMIZE and
    without rebuilding the table state (Spark jobs, seconds beside OPTIMIZE's own)."""
    from rmq_spark.spark import delta_append
    from rmq_spark.spark.delta_append import ALL_FILES_IN_CRC, keep_file_lists_out_of_checksums

    keep_file_lists_out_of_checksums(spark)  # as the reput does, before its first commit
    monkeypatch.setattr(delta_append, "_one_attempt", [])  # a clone of the session as it is now
    try:
        path, commit = _two_small_files(spark, tmp_path)
        restore = _optimize_with_a_late_checksum(spark, path, held_s=60.0)
        restore.cancel()
        crc = max((Path(path) / "_delta_log").glob("*.json")).with_suffix(".crc")
        adds = [_file(Path(path), _queue_rows(20, 10))]
        waits: list[int] = []  # the reput resumes a paused OPTIMIZE process here
        written, jobs = _jobs_of(
            spark,
            "commit-after",
            lambda: commit_files_once(
                spark, path, adds, version=3, on_checksum_wait=lambda: waits.append(1), **commit
            ),
        )
    finally:
        spark.conf.unset(ALL_FILES_IN_CRC)
    assert written == 10
    assert jobs == 0
    assert not waits, "waited for the other writer's checksum"
    assert json.loads(crc.read_text()) == json.loads(restore.args[0])  # OPTIMIZE's own
    assert spark.read.format("delta").load(path).count() == 30


@pytest.mark.spark
def test_a_checksum_delta_cannot_derive_is_left_to_its_writer(spark, tmp_path: Path) -> None:
    """Another writer's commit that Delta cannot read, or no checksum before it: nothing is
    written for it here (the commit then waits for the writer's own, as before)."""
    from rmq_spark.spark import delta_append

    keep = delta_append.ALL_FILES_IN_CRC
    path, _ = _two_small_files(spark, tmp_path)
    classes = delta_append._classes(spark)
    delta_log = delta_append._delta_log(spark, path)
    session = spark._jsparkSession.cloneSession()
    session.conf().set(keep, "false")
    snapshot = delta_log.unsafeVolatileSnapshot()
    log_dir = Path(path) / "_delta_log"
    (log_dir / f"{3:020d}.json").write_text("not a commit\n")
    assert not delta_append._derive_checksum(classes, session, delta_log, snapshot, 3)
    (log_dir / f"{2:020d}.crc").unlink()
    (log_dir / f"{3:020d}.json").write_text((log_dir / f"{2:020d}.json").read_text())
    assert not delta_append._derive_checksum(classes, session, delta_log, snapshot, 3)
    session.conf().set(keep, "true")  # a session whose checksums list the files
    assert not delta_append._derive_checksum(classes, session, delta_log, snapshot, 3)
    assert not (log_dir / f"{3:020d}.crc").exists()


@pytest.mark.spark
def test_a_commit_whose_version_another_writer_took_starts_again_without_a_state_rebuild(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OPTIMIZE commits between our version check and our commit, its checksum still to
    come: ours starts again on OPTIMIZE's version once its checksum is there, rather than
    Delta deriving our checksum from a missing one (a state rebuild)."""
    from rmq_spark.spark import delta_append

    path, commit = _two_small_files(spark, tmp_path)
    checked = delta_append._txn_version
    restores: list[threading.Thread] = []

    def racing(txn: object, app_id: str) -> int:
        version = checked(txn, app_id)
        if not restores:  # OPTIMIZE, from a thread of its own (its jobs are not ours)
            other = threading.Thread(
                target=lambda: restores.append(_optimize_with_a_late_checksum(spark, path))
            )
            other.start()
            other.join()
        return version

    monkeypatch.setattr(delta_append, "_txn_version", racing)
    adds = [_file(Path(path), _queue_rows(20, 10))]
    written, jobs = _jobs_of(
        spark, "commit-raced", lambda: commit_files_once(spark, path, adds, version=3, **commit)
    )
    restores[0].join()
    assert written == 10
    assert jobs == 0
    assert spark.read.format("delta").load(path).count() == 30
    assert delta_append.committed_txn_version(spark, path, "reput") == 3


def _encodings(path: Path) -> dict[str, set[str]]:
    import pyarrow.parquet as pq

    group = pq.ParquetFile(path).metadata.row_group(0)
    return {
        group.column(i).path_in_schema: set(group.column(i).encodings)
        for i in range(group.num_columns)
    }


@pytest.mark.parametrize("several", [False, True])
def test_columns_unique_by_construction_get_no_dictionary(tmp_path: Path, several) -> None:
    """Dictionary pages for ids, keys and offsets cost a third of the ``messages`` write and
    save nothing; every listed column exists (pyarrow ignores an unknown name)."""
    from source_support import LogWriter, make_record

    from rmq_spark.spark.options import parse_options
    from rmq_spark.spark.partitions import open_view, plan
    from rmq_spark.spark.reput_files import (
        DICTIONARY_COLUMNS,
        ReputFileTask,
        write_partition_files,
    )
    from rmq_spark.spark.tables import MESSAGES, ONE_STORE, TABLE_NAMES, StoreOfSeveral

    log = LogWriter(tmp_path / "store")
    log.extend(make_record(i) for i in range(50))
    log.set_confirm()
    layout = StoreOfSeveral(str(log.store_dir)) if several else ONE_STORE
    options = parse_options({"path": str(log.store_dir)}, streaming=True)
    tables = tmp_path / "tables"
    for name in TABLE_NAMES:
        table_path(tables, name).mkdir(parents=True)
    task = ReputFileTask(options, str(tables), dict.fromkeys(TABLE_NAMES, 0), (1000,), layout)
    (partition,) = plan(open_view(options), options, 0, log.end_offset, [])
    written = write_partition_files(task, partition)
    for name in TABLE_NAMES:
        (add,) = written.adds[name]
        encodings = _encodings(table_path(tables, name) / add["path"])
        dictionary = {path for path, kinds in encodings.items() if "RLE_DICTIONARY" in kinds}
        wanted = set(DICTIONARY_COLUMNS[name]) - ({"store"} if not several else set())
        assert dictionary == wanted & set(encodings), name
        assert wanted <= set(encodings), name
    messages = _encodings(table_path(tables, MESSAGES) / written.adds[MESSAGES][0]["path"])
    assert "RLE_DICTIONARY" in messages["body"]
    for unique in ("msg_id", "uniq_key", "physical_offset", "store_timestamp", "keys.list.element"):
        assert "RLE_DICTIONARY" not in messages[unique]
