"""bench/peers/visible.py: which rows it times, and a smoke run of the harness (the broker, the
reput job beside it and a paced producer; every message sent is read back from the tables with
its put -> visible time)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest


def _delta_table(
    table: Path, commits: list[tuple[int, list[tuple[str, int]]]], first_version: int = 0
) -> None:
    """A Delta table as the harness reads it: per commit (commit time in ms, rows of
    (topic, store time in ms)), one Parquet file and one log entry, from ``first_version``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (table / "_delta_log").mkdir(parents=True, exist_ok=True)
    for version, (stamp_ms, rows) in enumerate(commits, start=first_version):
        name = f"part-{version}.parquet"
        topics, stamps = zip(*rows, strict=True)
        pq.write_table(
            pa.table(
                {"topic": list(topics), "store_timestamp": pa.array(stamps, pa.timestamp("ms"))}
            ),
            table / name,
        )
        stats = json.dumps({"numRecords": len(rows)})
        actions = [
            {"commitInfo": {"timestamp": stamp_ms}},
            {"add": {"path": name, "dataChange": True, "stats": stats}},
        ]
        (table / "_delta_log" / f"{version:020d}.json").write_text(
            "\n".join(json.dumps(action) for action in actions)
        )


def test_the_warm_up_stored_in_the_paced_phase_millisecond_is_not_timed(tmp_path: Path) -> None:
    """The warm-up's last message and the first paced one stored in the same millisecond (the
    fresh clone's 101 rows for 100 sends): the timed rows are the paced ones, exactly."""
    import visible  # bench/peers is on sys.path (conftest.py)

    first_paced_ms = 1_700_000_000_000
    warm_up = [(visible.WARM_UP_TOPIC, first_paced_ms - 5 + i) for i in range(6)]  # last: same ms
    paced = [(visible.TOPIC, first_paced_ms + i) for i in range(100)]
    _delta_table(
        tmp_path / "messages",
        [(first_paced_ms + 400, warm_up + paced[:40]), (first_paced_ms + 1_300, paced[40:])],
    )
    from delta_log_tail import DeltaLogTail

    latencies = visible.paced_latencies_ms(DeltaLogTail(tmp_path / "messages"))
    assert len(latencies) == 100
    assert latencies == sorted([400 - i for i in range(40)] + [1_300 - i for i in range(40, 100)])


def test_rows_of_commits_the_log_cleanup_removed_are_counted_and_timed(tmp_path: Path) -> None:
    """The reput removes old commit files after a checkpoint (``reput.log_retention_minutes``)
    while the run goes on: a tail that read them keeps their rows and commit times; one that
    never read them fails naming the lost version instead of counting short."""
    import visible
    from delta_log_tail import DeltaLogTail, following
    from peer_common import PeerError

    table = tmp_path / "messages"
    _delta_table(table, [(1_000, [(visible.TOPIC, 900)]), (2_000, [(visible.TOPIC, 1_500)])])
    tail = DeltaLogTail(table)
    with following(tail, interval_s=0.01):
        time.sleep(0.3)  # the thread reads versions 0 and 1
    for version in (0, 1):  # the cleanup
        (table / "_delta_log" / f"{version:020d}.json").unlink()
    _delta_table(table, [(3_000, [(visible.TOPIC, 2_990), (visible.TOPIC, 2_700)])], 2)
    assert tail.rows() == 4
    assert visible.paced_latencies_ms(tail) == [10, 100, 300, 500]
    assert [commit.version for commit in tail.commits()] == [0, 1, 2]

    with pytest.raises(PeerError, match=r"commit 0 of the Delta log was removed"):
        DeltaLogTail(table).rows()


@pytest.mark.slow
@pytest.mark.spark
def test_every_message_sent_is_visible_and_timed(capsys: pytest.CaptureFixture[str]) -> None:
    import visible

    args = ["--systems", "rmq-spark", "--rate", "50", "--seconds", "2", "--threads", "1"]
    assert visible.main(args) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["failed"] == 0 and result["sent"] == 100
    assert result["rows"] == result["sent"], result
    assert 0 < result["visible_p50_ms"] <= result["visible_max_ms"]


def test_the_slowest_batch_is_profiled_with_what_ran_beside_it() -> None:
    """The job's timeline lines, joined with the table's batches: the slowest batch's wait,
    Spark's phases, its files and commits, and the OPTIMIZE that overlapped it."""
    from visible_profile import slowest_batches, slowest_trigger

    from rmq_spark.spark.reput_timeline import parse_timeline

    log_text = "\n".join([
        "INFO rmq_spark.reput: reput batch 7: 10 messages",
        'INFO reput timeline {"kind": "trigger", "batch_id": 7, "start_ms": 1000,'
        ' "duration_ms": {"addBatch": 2400, "triggerExecution": 2500}, "rows": 0}',
        'INFO reput timeline {"kind": "batch", "batch_id": 7, "start_ms": 1050, "files_ms": 60,'
        ' "commits": {"messages": [61, 2390]}, "beside": ["OPTIMIZE"]}',
        'INFO reput timeline {"kind": "trigger", "batch_id": 8, "start_ms": 4000,'
        ' "duration_ms": {"addBatch": 200, "triggerExecution": 300}, "rows": 0}',
        'INFO reput timeline {"kind": "maintenance", "chore": "OPTIMIZE", "start_ms": 500,'
        ' "end_ms": 3000}',
        'INFO reput timeline {"kind": "batch", "batch_id": 9, "start_ms"',  # cut by the job's end
    ])  # fmt: skip
    events = parse_timeline(log_text)
    assert [event["kind"] for event in events] == ["trigger", "batch", "trigger", "maintenance"]
    batches = [
        {"batch_id": 7, "commit_ms": 3500, "rows": 10, "oldest_ms": 100, "max_ms": 3400},
        {"batch_id": 8, "commit_ms": 4300, "rows": 10, "oldest_ms": 3200, "max_ms": 1100},
    ]
    slowest = slowest_batches(batches, events, count=1)
    assert slowest == [{
        **batches[0], "waited_ms": 900,
        "spark_ms": {"addBatch": 2400, "triggerExecution": 2500},
        "files_ms": 60, "commits_ms": {"messages": [61, 2390]}, "beside": ["OPTIMIZE"],
    }]  # fmt: skip
    assert slowest_trigger(events)["batch_id"] == 7
    assert slowest_trigger(events)["beside"] == ["OPTIMIZE"]
    assert slowest_trigger([]) == {}
    # the timed phase only (batch 0 of a run is the warm-up's), and beside a chore only
    assert slowest_trigger(events, since_ms=2_000)["batch_id"] == 8
    assert slowest_trigger(events, since_ms=2_000, beside=True) == {}
    assert slowest_trigger(events, beside=True)["batch_id"] == 7
    # a chore still running when the job ended has no line of its own: the batch's says it
    running = parse_timeline("\n".join([
        'INFO reput timeline {"kind": "trigger", "batch_id": 8, "start_ms": 4000,'
        ' "duration_ms": {"addBatch": 200, "triggerExecution": 300}, "rows": 0}',
        'INFO reput timeline {"kind": "batch", "batch_id": 8, "start_ms": 4010, "files_ms": 5,'
        ' "commits": {"messages": [6, 190]}, "beside": ["OPTIMIZE"]}',
    ]))  # fmt: skip
    assert slowest_trigger(running, beside=True)["beside"] == ["OPTIMIZE"]
    assert slowest_batches(batches[1:], running)[0]["beside"] == ["OPTIMIZE"]


def test_a_reput_job_that_exits_at_start_fails_the_run_with_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that cannot start (here: a bad setting) ends the run at once with its error; the
    harness used to wait out its start timeout and report only that."""
    import visible

    monkeypatch.setattr(visible, "START_TIMEOUT_S", 60.0)
    with pytest.raises(visible.PeerError, match=r"exited with code \d+: .*unknown key"):
        visible._start_reput(
            tmp_path / "store", tmp_path / "tables", tmp_path / "reput.log",
            ["--set", "spark.no_such_key=1"],
        )  # fmt: skip


def test_a_jobs_cpu_counts_the_children_it_has_reaped(tmp_path: Path) -> None:
    """A Spark driver's short-lived forks (Hadoop's `chmod`, say) end before a reading of
    their own: their CPU is in the reaping parent's cutime/cstime, which the job's figure
    must count."""
    import subprocess
    import sys
    import time

    from peer_common import job_cpu_s

    done = tmp_path / "done"
    burn = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
    parent = subprocess.Popen(
        ["sh", "-c", f'"{sys.executable}" -c "{burn}"; touch {done}; sleep 30']
    )
    try:
        while not done.exists():
            time.sleep(0.05)
        assert job_cpu_s(parent.pid) >= 0.45
    finally:
        parent.kill()
        parent.wait()
