"""The batch writer: three tables per micro-batch, each commit idempotent under replay.

The writer reads a batch's log range from a real store (as the stream gives it), so these
tests put real messages, including transaction states and a delayed message.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from reput_rows import (
    LEVELS_MS,
    expected_consume_queue,
    expected_index,
    log_range,
    plain_rows,
    put_batches,
)

from rmq_spark.errors import TableError
from rmq_spark.spark.optimize_process import optimize_in_own_process
from rmq_spark.spark.reput import ReputBatchWriter
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.reput_timeline import parse_timeline
from rmq_spark.spark.tables import (
    CLUSTER_COLUMNS,
    CONSUME_QUEUE,
    MESSAGE_INDEX,
    MESSAGES,
    checkpoint_tables,
    optimize_tables,
    register_tables,
    table_path,
)
from rmq_spark.store.put import PutRequest

pytestmark = pytest.mark.spark


def _requests() -> list[list[PutRequest]]:
    first = [
        PutRequest("TopicTest", b"a", tags="A", keys=("k1", "k2"), properties={"UNIQ_KEY": "U0"}),
        PutRequest("TopicTest", b"b", tags="B", sys_flag=0x4, properties={"UNIQ_KEY": "U1"}),
        PutRequest("TopicTest", b"c", properties={"DELAY": "2"}),  # -> SCHEDULE_TOPIC_XXXX
    ]
    second = [
        PutRequest("TopicTest", b"d", keys=("k3",), sys_flag=0x8),
        PutRequest("TopicTest", b"e", sys_flag=0xC, properties={"UNIQ_KEY": "U4"}),
    ]
    return [first, second]


def _batch(spark, store: Path, rows: list[dict]):  # noqa: ANN202
    """The source's rows of these stored messages, as the reput job's micro-batch DataFrame
    (which reads every record, prepared and rolled-back ones too)."""
    start, end = log_range(rows)
    frame = spark.read.format("rocketmq").option("isolation", "read_uncommitted").load(str(store))
    return frame.where(f"physical_offset >= {start} AND physical_offset < {end}")


def _table(spark, tables: Path, name: str) -> list[tuple]:
    return plain_rows(spark.read.format("delta").load(str(table_path(tables, name))).collect())


def _keyed_batches(store: Path, count: int) -> list[list[dict]]:
    """``count`` batches of one message each, keyed ``k0``, ``k1``..., put into ``store``."""
    return put_batches(
        store, [[PutRequest("TopicTest", b"x", keys=(f"k{i}",))] for i in range(count)]
    )


def _writer(spark, tmp_path: Path) -> ReputBatchWriter:
    store = tmp_path / "store"
    config = ReputConfig(tables_dir=tmp_path / "tables", optimize_interval_batches=0)
    return ReputBatchWriter(spark, store, config, LEVELS_MS)


def _assert_tables_hold_exactly(spark, tables: Path, rows: list[dict]) -> None:
    assert _table(spark, tables, CONSUME_QUEUE) == plain_rows(expected_consume_queue(rows))
    assert _table(spark, tables, MESSAGE_INDEX) == plain_rows(expected_index(rows))
    offsets = sorted(r[3] for r in _table(spark, tables, MESSAGES))
    assert offsets == sorted(row["physical_offset"] for row in rows)


def test_replayed_batches_add_nothing_twice(spark, tmp_path: Path) -> None:
    first, second = put_batches(tmp_path / "store", _requests())
    assert first[2]["topic"] == "SCHEDULE_TOPIC_XXXX"
    store = tmp_path / "store"
    writer = _writer(spark, tmp_path)
    writer(_batch(spark, store, first), 0)
    writer(_batch(spark, store, first), 0)  # the same batch again in the same driver
    writer(_batch(spark, store, second), 1)

    restarted = _writer(spark, tmp_path)  # a new driver: floors come from the tables
    restarted(_batch(spark, store, second), 1)
    restarted.floors = dict.fromkeys(restarted.floors, 0)  # only Delta's txn check is left
    restarted(_batch(spark, store, first), 0)
    restarted(_batch(spark, store, second), 1)

    _assert_tables_hold_exactly(spark, tmp_path / "tables", first + second)
    assert writer.messages_written == 5


def test_batch_interrupted_after_the_first_table_completes_on_replay(spark, tmp_path: Path) -> None:
    (first,) = put_batches(tmp_path / "store", _requests()[:1])
    tables = tmp_path / "tables"
    start, end = log_range(first)
    crashed = _writer(spark, tmp_path)
    # The crash: only message_index of batch 0 was committed.
    crashed.floors = {MESSAGES: end, CONSUME_QUEUE: end, MESSAGE_INDEX: 0}
    assert crashed.write_range(start, end, 0) == {MESSAGE_INDEX: 5}  # U0 k1 k2, U1, a key
    writer = _writer(spark, tmp_path)
    assert writer.floors == {MESSAGES: 0, CONSUME_QUEUE: 0, MESSAGE_INDEX: end}
    writer.floors = dict.fromkeys(writer.floors, 0)
    writer(_batch(spark, tmp_path / "store", first), 0)

    _assert_tables_hold_exactly(spark, tables, first)


def test_register_tables_points_the_catalog_at_each_tables_dir(spark, tmp_path: Path) -> None:
    store = tmp_path / "store"
    first, second = put_batches(store, _requests())
    for name, rows in (("a", first), ("b", second)):
        config = ReputConfig(tables_dir=tmp_path / name, optimize_interval_batches=0)
        ReputBatchWriter(spark, store, config, LEVELS_MS)(_batch(spark, store, rows), 0)
    register_tables(spark, tmp_path / "a", "rmq")
    assert spark.sql("SELECT count(*) FROM rmq.messages").first()[0] == len(first)
    register_tables(spark, tmp_path / "b", "rmq")
    assert spark.sql("SELECT count(*) FROM rmq.messages").first()[0] == len(second)
    detail = spark.sql("DESCRIBE DETAIL rmq.consume_queue").first()
    assert list(detail["clusteringColumns"]) == ["topic", "queue_id", "queue_offset"]


def test_checkpoints_are_written_beside_the_stream_not_by_the_commits(
    spark, tmp_path: Path
) -> None:
    store, tables = tmp_path / "store", tmp_path / "tables"
    chunks = put_batches(store, [[PutRequest("TopicTest", b"x")] for _ in range(3)])
    config = ReputConfig(
        tables_dir=tables, optimize_interval_batches=0, checkpoint_interval_batches=2
    )
    writer = ReputBatchWriter(spark, store, config, LEVELS_MS)
    writer(_batch(spark, store, chunks[0]), 0)
    writer.maintenance.wait()
    names = (MESSAGES, MESSAGE_INDEX, CONSUME_QUEUE)
    assert not any((table_path(tables, n) / "_delta_log/_last_checkpoint").exists() for n in names)
    writer(_batch(spark, store, chunks[1]), 1)  # the 2nd batch: the maintenance thread's turn
    writer.maintenance.wait()
    assert writer.maintenance.runs == 1 and writer.maintenance.failures == 0
    for name in names:
        assert (table_path(tables, name) / "_delta_log/_last_checkpoint").exists(), name
    writer(_batch(spark, store, chunks[2]), 2)
    _assert_tables_hold_exactly(spark, tables, [row for chunk in chunks for row in chunk])


def _age_log(tables: Path, age_s: float) -> None:
    """Every log file of the three tables written ``age_s`` ago."""
    then = time.time() - age_s
    for name in (MESSAGES, MESSAGE_INDEX, CONSUME_QUEUE):
        for path in (table_path(tables, name) / "_delta_log").iterdir():
            os.utime(path, (then, then))


def _log_versions(tables: Path, name: str) -> set[int]:
    log_dir = table_path(tables, name) / "_delta_log"
    return {
        int(p.name.lstrip(".")[:20]) for p in log_dir.iterdir() if p.name.lstrip(".")[:1].isdigit()
    }


@pytest.mark.parametrize("retention_minutes", [10, 0])
def test_the_checkpoints_remove_log_files_older_than_the_retention_and_spark_reads_on(
    spark, tmp_path: Path, retention_minutes: int
) -> None:
    """Delta lists the whole ``_delta_log`` on every commit: a stream's log that only grows
    makes every commit slower (bench/bench_delta_log.py). After a checkpoint the reput removes
    the versions below the newest checkpoint older than ``log_retention_minutes`` (0: none),
    checksums and Hadoop's hidden files included; Spark reads every row, the versions kept
    by time travel, and a replayed batch still adds nothing."""
    store, tables = tmp_path / "store", tmp_path / "tables"
    chunks = _keyed_batches(store, 4)
    config = ReputConfig(
        tables_dir=tables,
        optimize_interval_batches=0,
        checkpoint_interval_batches=2,
        log_retention_minutes=retention_minutes,
    )
    writer = ReputBatchWriter(spark, store, config, LEVELS_MS)
    for batch_id in (0, 1):  # table versions 1 and 2 (0: created); a checkpoint of version 2
        writer(_batch(spark, store, chunks[batch_id]), batch_id)
    writer.maintenance.wait()
    _age_log(tables, 11 * 60)  # versions 0-2 and the checkpoint: older than 10 minutes
    for batch_id in (2, 3):  # versions 3 and 4, a checkpoint of version 4: young
        writer(_batch(spark, store, chunks[batch_id]), batch_id)
    writer.maintenance.wait()
    assert writer.maintenance.failures == 0
    kept = {0, 1, 2, 3, 4} if retention_minutes == 0 else {2, 3, 4}
    for name in (MESSAGES, MESSAGE_INDEX, CONSUME_QUEUE):
        assert _log_versions(tables, name) == kept, name
    writer(_batch(spark, store, chunks[3]), 3)  # a replay: Delta's txn version still holds
    _assert_tables_hold_exactly(spark, tables, [row for chunk in chunks for row in chunk])
    path = str(table_path(tables, MESSAGES))
    assert spark.read.format("delta").option("versionAsOf", 2).load(path).count() == 2
    if retention_minutes:
        with pytest.raises(Exception, match="(?i)version"):
            spark.read.format("delta").option("versionAsOf", 1).load(path).count()


def test_a_checkpoint_runs_no_spark_job_and_spark_reads_the_tables_from_it(
    spark, tmp_path: Path
) -> None:
    """The reput's checkpoints are delta-rs's: no Spark job (Delta's own rebuilt the table
    state in one of seconds, beside the stream), and Spark reads the tables from them as they
    were: every row, the reput's app transaction version, the clustering columns. Tables
    Spark checkpointed before (as the reput used to) keep passing Hadoop's checksum check
    on ``_last_checkpoint``."""
    store, tables = tmp_path / "store", tmp_path / "tables"
    chunks = _keyed_batches(store, 3)
    config = ReputConfig(tables_dir=tables, optimize_interval_batches=0)
    writer = ReputBatchWriter(spark, store, config, LEVELS_MS)
    jvm = spark._jvm
    for batch_id, chunk in enumerate(chunks):
        writer(_batch(spark, store, chunk), batch_id)
        if batch_id == 0:  # a checkpoint of Spark's own first, with Hadoop's checksum beside
            for name in (MESSAGES, MESSAGE_INDEX, CONSUME_QUEUE):
                path = str(table_path(tables, name))
                jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
                    spark._jsparkSession, path
                ).checkpoint()
    tracker = spark.sparkContext.statusTracker()
    jobs_before = set(tracker.getJobIdsForGroup())
    checkpoint_tables(tables)
    assert set(tracker.getJobIdsForGroup()) == jobs_before
    none = jvm.scala.Option.apply(None)
    for name, columns in CLUSTER_COLUMNS.items():
        path = table_path(tables, name)
        last = jvm.org.apache.hadoop.fs.Path(str(path / "_delta_log" / "_last_checkpoint"))
        with_checksums = last.getFileSystem(spark._jsc.hadoopConfiguration())
        stream = with_checksums.open(last)
        try:
            assert stream.read() == ord("{")  # with a stale checksum: ChecksumException
        finally:
            stream.close()
        delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
            spark._jsparkSession, str(path)
        )
        snapshot = delta_log.update(False, none, none)
        assert snapshot.logSegment().checkpointProvider().version() == snapshot.version() == 3
        assert snapshot.transactions().get(config.txn_app_id).get() == log_range(chunks[2])[1]
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()
        assert tuple(detail["clusteringColumns"]) == columns, name
    _assert_tables_hold_exactly(spark, tables, [row for chunk in chunks for row in chunk])


def test_each_batch_logs_its_timeline_and_the_chores_beside_it(
    spark, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Where a batch's time went (files, each table's commit) and each maintenance chore's
    span, as the lines bench/peers/visible.py profiles the slowest batches with."""
    store, tables = tmp_path / "store", tmp_path / "tables"
    chunks = put_batches(store, [[PutRequest("TopicTest", b"x")] for _ in range(2)])
    config = ReputConfig(
        tables_dir=tables, optimize_interval_batches=0, checkpoint_interval_batches=1
    )
    writer = ReputBatchWriter(spark, store, config, LEVELS_MS)
    with caplog.at_level(logging.INFO, logger="rmq_spark.reput"):
        writer(_batch(spark, store, chunks[0]), 0)
        writer(_batch(spark, store, chunks[1]), 1)
        writer.maintenance.wait()
    events = parse_timeline(caplog.text)
    batches = [event for event in events if event["kind"] == "batch"]
    assert [event["batch_id"] for event in batches] == [0, 1]
    for event in batches:
        assert event["messages"] == 1 and event["files_ms"] >= 0
        assert set(event["commits"]) == {MESSAGES, MESSAGE_INDEX, CONSUME_QUEUE}
        for begin, end in event["commits"].values():
            assert event["files_ms"] <= begin <= end <= event["write_ms"] + event["range_ms"] + 1
    # a state rebuild beside the batches (OPTIMIZE's) runs in one task
    assert spark.conf.get("spark.databricks.delta.snapshotPartitions") == "1"
    chores = [event for event in events if event["kind"] == "maintenance"]
    assert chores and all(e["chore"] == "checkpoint" for e in chores)
    assert all(e["start_ms"] <= e["end_ms"] for e in chores)


def test_commits_write_no_file_list_into_the_version_checksums(spark, tmp_path: Path) -> None:
    """Delta keeps a small table's whole file list in each version checksum; rebuilding it
    (after OPTIMIZE brings a table back under 50 files) held the table's lock for seconds
    while the stream's next commit waited. The reput's checksums carry the counts and the
    SetTransactions its replays rely on, and no file list."""
    store, tables = tmp_path / "store", tmp_path / "tables"
    chunks = put_batches(store, [[PutRequest("TopicTest", b"x")] for _ in range(2)])
    writer = _writer(spark, tmp_path)
    writer(_batch(spark, store, chunks[0]), 0)
    writer(_batch(spark, store, chunks[1]), 1)
    for name in (MESSAGES, MESSAGE_INDEX, CONSUME_QUEUE):
        log_dir = table_path(tables, name) / "_delta_log"
        checksum = json.loads(sorted(log_dir.glob("*.crc"))[-1].read_text())
        assert "allFiles" not in checksum, name
        assert "numFiles" in checksum and checksum["setTransactions"], name


@pytest.mark.slow
def test_optimize_commits_next_to_concurrent_appends(spark, tmp_path: Path) -> None:
    tables, store = tmp_path / "tables", tmp_path / "store"
    requests = [PutRequest("TopicTest", b"x", keys=(f"k{i}",)) for i in range(40)]
    chunks = put_batches(store, [requests[i : i + 5] for i in range(0, len(requests), 5)])
    rows = [row for chunk in chunks for row in chunk]
    writer = _writer(spark, tmp_path)
    writer(_batch(spark, store, chunks[0]), 0)
    errors: list[BaseException] = []

    def append_rest() -> None:
        try:
            for batch_id, chunk in enumerate(chunks[1:], start=1):
                writer(_batch(spark, store, chunk), batch_id)
        except BaseException as err:  # reported below, in the test's thread
            errors.append(err)

    appender = threading.Thread(target=append_rest)
    appender.start()
    compactions = 0
    while appender.is_alive() or compactions < 2:
        optimize_tables(spark, tables)
        compactions += 1
    appender.join()

    assert errors == []
    _assert_tables_hold_exactly(spark, tables, rows)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table_path(tables, MESSAGES)}`").collect()
    assert {"WRITE", "OPTIMIZE"} <= {row.operation for row in history}


def test_optimize_commits_through_a_delta_log_of_its_own(spark, tmp_path: Path) -> None:
    """A reput commit installs its new snapshot on the table's shared ``DeltaLog``; on that
    instance it waited up to 0.9 s for OPTIMIZE, which fills the old snapshot's state cache
    under its monitor (BENCHMARKS.md, issue 33). OPTIMIZE works on an instance of its own:
    the shared one does not see its commit until it next looks at the log."""
    from rmq_spark.spark.delta_append import _delta_log

    tables, store = tmp_path / "tables", tmp_path / "store"
    requests = [PutRequest("TopicTest", b"x", keys=(f"k{i}",)) for i in range(10)]
    chunks = put_batches(store, [requests[:5], requests[5:]])
    writer = _writer(spark, tmp_path)
    for batch_id, chunk in enumerate(chunks):
        writer(_batch(spark, store, chunk), batch_id)
    path = str(table_path(tables, MESSAGES))
    shared = _delta_log(spark, path)
    before = shared.unsafeVolatileSnapshot().version()
    assert optimize_tables(spark, tables)[MESSAGES] == 2
    assert shared.unsafeVolatileSnapshot().version() == before  # not told of OPTIMIZE's commit
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()  # reads the log again
    assert max(r.version for r in history if r.operation == "OPTIMIZE") > before
    _assert_tables_hold_exactly(spark, tables, [row for chunk in chunks for row in chunk])


def test_a_checkpoint_that_cannot_be_written_is_a_table_error_naming_the_table(
    tmp_path: Path,
) -> None:
    """The maintenance thread reports a TableError as one warning line and tries again at the
    next interval; anything else would end the thread with a traceback."""
    import pyarrow as pa
    from deltalake import write_deltalake

    path = table_path(tmp_path, MESSAGES)
    write_deltalake(str(path), pa.table({"x": [1]}))
    (path / "_delta_log" / "._last_checkpoint.crc").mkdir()  # cannot be removed as a file
    with pytest.raises(TableError, match=f"{MESSAGES}: checkpoint of .* failed"):
        checkpoint_tables(tmp_path)


def _children(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    found: list[int] = []
    for task in tasks.iterdir() if tasks.exists() else ():
        children = task / "children"
        if children.exists():
            found += [int(child) for child in children.read_text().split()]
    return found


def _niceness(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def _optimize_processes(parent: int, deadline_s: float) -> list[int]:
    """The OPTIMIZE process the parent started and its descendants, once its JVM has started
    (within ``deadline_s``; [] if none showed)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for child in _children(parent):
            try:
                command = Path(f"/proc/{child}/cmdline").read_bytes()
            except FileNotFoundError:
                continue
            if b"rmq_spark.spark.optimize_process" in command and _descendants(child):
                return [child, *_descendants(child)]
        time.sleep(0.02)
    return []


def _descendants(pid: int) -> list[int]:
    found = _children(pid)
    return found + [grandchild for child in found for grandchild in _descendants(child)]


def test_maintenance_runs_optimize_in_a_process_of_its_own_at_its_niceness(
    spark, tmp_path: Path
) -> None:
    """OPTIMIZE in the job's JVM took a core, its heap and its collector from the stream's
    commits (4-5x slower beside it, BENCHMARKS.md); in a child niced before its JVM starts,
    every thread of it yields the CPU to the stream."""
    store, tables = tmp_path / "store", tmp_path / "tables"
    chunks = _keyed_batches(store, 2)
    config = ReputConfig(
        tables_dir=tables,
        optimize_interval_batches=2,
        optimize_niceness=7,
        checkpoint_interval_batches=1000,
    )
    writer = ReputBatchWriter(spark, store, config, LEVELS_MS)
    writer(_batch(spark, store, chunks[0]), 0)
    writer(_batch(spark, store, chunks[1]), 1)  # OPTIMIZE's turn
    processes = _optimize_processes(os.getpid(), deadline_s=60)
    assert processes, "no OPTIMIZE process with a JVM was started"
    niceness = {pid: _niceness(pid) for pid in processes}
    groups = {os.getpgid(pid) for pid in processes}
    with writer.maintenance.quiet():  # as while a batch is written
        states = _settled_states(processes, "T")
    running = {pid: _state(pid) for pid in processes}
    writer.maintenance.wait()

    assert set(niceness.values()) == {7}, niceness  # its JVM's too
    assert groups == {processes[0]}, groups  # a process group of its own, to pause
    assert set(states.values()) == {"T"}, states  # stopped while the batch is written
    assert "T" not in running.values(), running
    assert writer.maintenance.runs == 1 and writer.maintenance.failures == 0
    path = table_path(tables, MESSAGES)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert "OPTIMIZE" in {row.operation for row in history}
    _assert_tables_hold_exactly(spark, tables, [row for chunk in chunks for row in chunk])


def test_optimize_in_its_own_process_reports_a_failure_as_one_table_error_line(
    tmp_path: Path,
) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    path = table_path(tmp_path, MESSAGES)
    write_deltalake(str(path), pa.table({"x": [1]}))
    (path / "_delta_log" / f"{1:020d}.json").write_text("not a Delta log entry\n")
    with pytest.raises(TableError) as raised:
        optimize_in_own_process(tmp_path, niceness=0)
    message = str(raised.value)
    assert re.match(
        f"OPTIMIZE in its own process failed: {MESSAGES}: OPTIMIZE of .* failed", message
    )
    assert "\n" not in message


@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused"])
def test_the_optimize_process_and_its_jvm_end_with_the_job(tmp_path: Path, paused: bool) -> None:
    """A job killed with -9 mid-OPTIMIZE leaves no process of it behind, also when it was
    paused for a batch (stopped, it cannot watch its parent: the kernel continues an orphaned
    process group with a SIGHUP)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(str(table_path(tmp_path, MESSAGES)), pa.table({"x": [1]}))
    job = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from rmq_spark.spark.optimize_process import optimize_in_own_process;"
            "optimize_in_own_process(sys.argv[1], niceness=0)",
            str(tmp_path),
        ]
    )
    try:
        left = _optimize_processes(job.pid, deadline_s=60)
        assert left, "no OPTIMIZE process with a JVM was started"
        if paused:  # stopped before the job dies (the kernel's rule looks at that moment)
            os.killpg(left[0], signal.SIGSTOP)
            assert set(_settled_states(left, "T").values()) == {"T"}
    finally:
        job.kill()
        job.wait()
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{pid}").exists() for pid in left) and time.monotonic() < deadline:
        time.sleep(0.1)
    running = [pid for pid in left if _alive(pid)]
    assert running == [], f"still running after the job was killed: {running}"


def _state(pid: int) -> str:
    """The process's state letter (R, S, T: stopped, Z...); "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return ""


def _settled_states(pids: list[int], wanted: str, deadline_s: float = 10) -> dict[int, str]:
    """Each process's state once all are ``wanted`` (a signal lands asynchronously), or as
    they are at the deadline."""
    deadline = time.monotonic() + deadline_s
    states = {pid: _state(pid) for pid in pids}
    while set(states.values()) != {wanted} and time.monotonic() < deadline:
        time.sleep(0.01)
        states = {pid: _state(pid) for pid in pids}
    return states


def _alive(pid: int) -> bool:
    return _state(pid) not in ("", "Z")


def test_a_checkpoint_due_while_optimize_runs_is_written_not_skipped(spark, tmp_path: Path) -> None:
    """OPTIMIZE at the lowest priority runs for minutes beside a busy stream; when it held the
    only maintenance thread, every checkpoint due meanwhile was skipped and each commit
    listed and replayed every log entry since the last one (seconds a batch, BENCHMARKS.md)."""
    store, tables = tmp_path / "store", tmp_path / "tables"
    chunks = put_batches(store, [[PutRequest("TopicTest", b"x")] for _ in range(2)])
    config = ReputConfig(
        tables_dir=tables, optimize_interval_batches=1, checkpoint_interval_batches=2
    )
    writer = ReputBatchWriter(spark, store, config, LEVELS_MS)
    writer(_batch(spark, store, chunks[0]), 0)  # starts OPTIMIZE: seconds, a JVM to start
    assert writer.maintenance.chores == ["OPTIMIZE"]
    writer(_batch(spark, store, chunks[1]), 1)  # a checkpoint is due
    writer.maintenance.wait()

    names = (MESSAGES, MESSAGE_INDEX, CONSUME_QUEUE)
    assert all((table_path(tables, n) / "_delta_log/_last_checkpoint").exists() for n in names)
    assert writer.maintenance.runs == 2 and writer.maintenance.failures == 0


def test_the_lowest_priority_is_the_idle_class() -> None:
    """A niced OPTIMIZE delayed each wake-up of the stream's threads by its time slice: the
    idle class is preempted by any task that wakes."""
    probe = (
        "import os, sys\n"
        "from rmq_spark.spark.optimize_process import LOWEST_PRIORITY, lower_priority\n"
        "lower_priority(LOWEST_PRIORITY)\n"
        "print(os.sched_getscheduler(0) == os.SCHED_IDLE, os.getpriority(os.PRIO_PROCESS, 0))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "19"], done.stderr


def test_a_job_told_to_stop_ends_its_optimize_rather_than_waiting_for_it(
    spark, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Paused between batches and in the idle class, an OPTIMIZE may have minutes to go: a
    job stopped with Ctrl-C ends it (it commits all or nothing) instead of waiting."""
    store, tables = tmp_path / "store", tmp_path / "tables"
    chunks = put_batches(store, [[PutRequest("TopicTest", b"x")]])
    config = ReputConfig(
        tables_dir=tables, optimize_interval_batches=1, checkpoint_interval_batches=1000
    )
    writer = ReputBatchWriter(spark, store, config, LEVELS_MS)
    writer(_batch(spark, store, chunks[0]), 0)  # starts OPTIMIZE
    processes = _optimize_processes(os.getpid(), deadline_s=60)
    assert processes, "no OPTIMIZE process with a JVM was started"
    os.killpg(processes[0], signal.SIGSTOP)  # as between batches
    with caplog.at_level(logging.INFO, logger="rmq_spark.reput"):
        writer.maintenance.wait(60, end_optimize=True)

    assert not writer.maintenance.running
    assert [pid for pid in processes if _alive(pid)] == []
    assert "OPTIMIZE ended with the job" in caplog.text
    assert writer.maintenance.failures == 0
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table_path(tables, MESSAGES)}`").collect()
    assert "OPTIMIZE" not in {row.operation for row in history}
