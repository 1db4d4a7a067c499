"""bench/peers/visible.py: which rows it times, and a smoke run of the harness (the broker, the
reput job beside it and a paced producer; every message sent is read back from the tables with
its put -> visible time)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _delta_table(table: Path, commits: list[tuple[int, list[tuple[str, int]]]]) -> None:
    """A Delta table as the harness reads it: per commit (commit time in ms, rows of
    (topic, store time in ms)), one Parquet file and one log entry."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (table / "_delta_log").mkdir(parents=True)
    for version, (stamp_ms, rows) in enumerate(commits):
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
    latencies = visible.paced_latencies_ms(tmp_path)
    assert len(latencies) == 100
    assert latencies == sorted([400 - i for i in range(40)] + [1_300 - i for i in range(40, 100)])


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
