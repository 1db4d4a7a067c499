"""The one end-of-log rule (store/scan.py), as verify, dump and the Spark source's planner see
it: no silent under-read, power loss, stores written by Apache RocketMQ, clear errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from store_helpers import open_store, put_many, segment_paths

from rmq_spark.cli.store_commands import main
from rmq_spark.errors import CheckpointDamagedError, DataLossError, DataMissingError
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.source import RocketMQBatchReader
from rmq_spark.store.view import StoreView

SEGMENT = 4096


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def _closed_store(root: Path, count: int = 30) -> list:
    store = open_store(root)
    results = put_many(store, count, body_size=150)
    store.close()
    return results


def _batch_partitions(root: Path, **options: str) -> list:
    return RocketMQBatchReader(
        parse_options({"path": str(root), **options}, streaming=False)
    ).partitions()


def _tree(root: Path) -> dict[str, int]:
    """Every file under ``root`` with its size: what a read-only command must leave alone."""
    return {
        str(path.relative_to(root)): path.stat().st_size
        for path in root.rglob("*")
        if path.is_file()
    }


def _truncate(path: Path, length: int) -> None:
    with path.open("r+b") as handle:
        handle.truncate(length)


# --- 1. no silent under-read ---------------------------------------------------------------


def test_truncating_the_last_segment_at_every_byte_of_its_last_records_fails_loudly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pristine = tmp_path / "pristine"
    results = _closed_store(pristine)
    last = segment_paths(pristine)[-1]
    base = int(last.name)
    in_last = [r for r in results if r.physical_offset >= base]
    data_end = in_last[-1].physical_offset + in_last[-1].total_size - base
    first_cut = in_last[-2].physical_offset - base
    root = tmp_path / "cut"
    shutil.copytree(pristine, root)
    for cut in range(first_cut, data_end):
        # The readers below write nothing: restoring the one cut segment is a pristine copy.
        shutil.copyfile(last, root / "commitlog" / last.name)
        _truncate(root / "commitlog" / last.name, cut)
        code, out, _ = _run(["verify", "--store", str(root)], capsys)
        assert code == 1, (cut, out)
        assert out[0].startswith(f"BAD {root / 'commitlog' / last.name} position "), out
        assert "acknowledged data are missing" in out[0], out
        code, out, err = _run(["dump", "--store", str(root)], capsys)
        assert code == 2 and str(root / "commitlog" / last.name) in err, (cut, err)
        with pytest.raises(DataMissingError, match=f"{last.name}: the data ends"):
            _batch_partitions(root)  # what the Spark source plans from (no JVM needed)
    assert _tree(root) == _tree(pristine) | {f"commitlog/{last.name}": data_end - 1}
    # Cut inside the zeros after the data: nothing acknowledged is missing.
    shutil.rmtree(root)
    shutil.copytree(pristine, root)
    _truncate(root / "commitlog" / last.name, data_end + 8)
    code, out, _ = _run(["verify", "--store", str(root)], capsys)
    assert code == 0 and out[0].startswith(f"OK {len(results)} records"), out


@pytest.mark.parametrize("how", ["empty", "deleted"])
def test_an_empty_or_deleted_last_segment_is_missing_data(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _closed_store(tmp_path)
    last = segment_paths(tmp_path)[-1]
    if how == "empty":
        _truncate(last, 0)
    else:
        last.unlink()
    code, out, _ = _run(["verify", "--store", str(tmp_path)], capsys)
    assert code == 1 and out[0].startswith(f"BAD {last} position 0"), out
    code, out, err = _run(["dump", "--store", str(tmp_path)], capsys)
    assert code == 2 and str(last) in err and not out
    with pytest.raises(DataMissingError, match="acknowledged data are missing") as info:
        _batch_partitions(tmp_path)
    assert info.value.path == str(last)


@pytest.mark.parametrize("where", ["record-boundary", "mid-record", "header"])
def test_the_spark_planner_refuses_a_truncated_last_segment(tmp_path: Path, where: str) -> None:
    results = _closed_store(tmp_path)
    last = segment_paths(tmp_path)[-1]
    victim = results[-2]
    position = victim.physical_offset - int(last.name)
    cut = {"record-boundary": position, "mid-record": position + 100, "header": position + 5}
    _truncate(last, cut[where])
    with pytest.raises(DataMissingError, match=f"{last.name}: the data ends"):
        _batch_partitions(tmp_path)


def test_a_deleted_first_segment_is_loss_unless_retention_recorded_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _closed_store(tmp_path)
    first = segment_paths(tmp_path)[0]
    first.unlink()
    code, out, _ = _run(["verify", "--store", str(tmp_path)], capsys)
    assert code == 1 and out[0].startswith(f"BAD {first} position 0"), out
    assert "retention did not record" in out[0]
    with pytest.raises(DataLossError, match="retention did not record"):
        _batch_partitions(tmp_path)
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "retention.json").write_text(
        json.dumps({"version": 1, "deleted_below": SEGMENT, "deletions": []})
    )
    code, out, _ = _run(["verify", "--store", str(tmp_path)], capsys)
    in_rest = [r for r in results if r.physical_offset >= SEGMENT]
    assert code == 0 and out[0].startswith(f"OK {len(in_rest)} records"), out
    assert _batch_partitions(tmp_path)


# --- 2. power loss: the tools see what recovery will see ------------------------------------


def _stale_checkpoint(root: Path, offset: int) -> None:
    """What a power loss leaves: the checkpoint (fsynced every 10 s) behind the data."""
    path = root / "checkpoint"
    data = bytearray(path.read_bytes())
    data[24:40] = offset.to_bytes(8, "big") * 2  # masterFlushedOffset, confirmPhyOffset
    path.write_bytes(bytes(data))


def test_after_a_power_loss_verify_and_dump_scan_to_the_real_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 40, body_size=150)
    store.abandon()  # abort stays; no broker holds the lock
    _stale_checkpoint(tmp_path, results[3].physical_offset)
    code, out, _ = _run(["verify", "--store", str(tmp_path)], capsys)
    assert code == 0 and out[0].startswith("OK 40 records"), out
    code, out, _ = _run(["dump", "--store", str(tmp_path)], capsys)
    assert code == 0 and len(out) == 40
    assert sum(len(p.slices) for p in _batch_partitions(tmp_path)) >= 1
    store = open_store(tmp_path)  # and recovery agrees
    assert store.recovery_report.end_offset == results[-1].physical_offset + results[-1].total_size
    store.close()


# --- 6. stores written by Apache RocketMQ -------------------------------------------------


def _as_rocketmq_left_it(root: Path) -> None:
    """RocketMQ 5.3.3 keeps confirmPhyOffset and masterFlushedOffset at 0 and writes no
    queue-offset snapshot; a crash leaves ``abort``."""
    _stale_checkpoint(root, 0)
    (root / "queue_offsets.json").unlink()
    (root / "abort").touch()


_HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_running_rocketmq_broker_s_store_is_read_to_its_last_complete_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Simulated (a real broker takes ~20 s to start): what a running RocketMQ broker shows
    # a reader is checkpoint zeros, `abort`, and a POSIX lock on <store>/lock held by
    # another process; its newest segment ends in a record being written.
    results = _closed_store(tmp_path)
    _as_rocketmq_left_it(tmp_path)
    last = segment_paths(tmp_path)[-1]
    end = results[-1].physical_offset + results[-1].total_size - int(last.name)
    with last.open("r+b") as handle:  # a record being written: its header, no more yet
        handle.seek(end)
        handle.write(bytes.fromhex("000001f4daa320a7"))
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(tmp_path / "lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        assert StoreView.open(tmp_path).broker_open
        code, out, _ = _run(["dump", "--store", str(tmp_path)], capsys)
        assert code == 0 and len(out) == len(results)
        code, out, _ = _run(["verify", "--store", str(tmp_path)], capsys)
        assert code == 0 and out[0].startswith(f"OK {len(results)} records"), out
        (partition, *_) = _batch_partitions(tmp_path)
        assert partition.slices[-1].end_offset == results[-1].physical_offset + (
            results[-1].total_size
        )
    finally:
        holder.communicate("")


def test_a_crashed_rocketmq_store_with_a_preallocated_next_file_is_read_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _closed_store(tmp_path)
    _as_rocketmq_left_it(tmp_path)
    last = segment_paths(tmp_path)[-1]
    (tmp_path / "commitlog" / f"{int(last.name) + SEGMENT:020d}").write_bytes(bytes(SEGMENT))
    code, out, _ = _run(["verify", "--store", str(tmp_path)], capsys)
    assert code == 0 and out[0].startswith(f"OK {len(results)} records"), out
    code, out, _ = _run(["dump", "--store", str(tmp_path)], capsys)
    assert code == 0 and len(out) == len(results)


# --- 7. clear errors -----------------------------------------------------------------------


def test_a_damaged_checkpoint_is_reported_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _closed_store(tmp_path)
    path = tmp_path / "checkpoint"
    data = bytearray(path.read_bytes())
    data[24:32] = (4338176185435107102).to_bytes(8, "big")
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointDamagedError, match="damaged checkpoint: masterFlushedOffset"):
        open_store(tmp_path)
    code, _, err = _run(["verify", "--store", str(tmp_path)], capsys)
    assert code == 2 and "damaged checkpoint" in err and "acknowledged" not in err
    code, _, err = _run(["dump", "--store", str(tmp_path)], capsys)
    assert code == 2 and "damaged checkpoint" in err


@pytest.mark.parametrize("command", ["send", "broker"])
def test_a_regular_file_as_store_is_one_line(tmp_path: Path, command: str) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    extra = ["--topic", "T", "--body", "b"] if command == "send" else []
    done = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", command, "--store", str(not_a_dir), *extra],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "is not a directory" in done.stderr and "Traceback" not in done.stderr


def test_dump_past_the_end_and_a_negative_limit_are_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _closed_store(tmp_path, 5)
    end = results[-1].physical_offset + results[-1].total_size
    code, out, err = _run(["dump", "--store", str(tmp_path), "--from-offset", str(end + 1)], capsys)
    assert code == 2 and not out and f"physical offset {end + 1}" in err
    code, out, err = _run(["dump", "--store", str(tmp_path), "--limit", "-1"], capsys)
    assert code == 2 and not out and "--limit -1" in err
    code, out, _ = _run(["dump", "--store", str(tmp_path), "--from-offset", str(end)], capsys)
    assert code == 0 and not out  # the end itself: nothing more to print
