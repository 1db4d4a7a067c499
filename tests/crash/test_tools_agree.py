"""verify, dump and recovery reach one verdict through the one judge (store/scan.py), and a
checkpoint that cannot be read is one typed line, never a bare OSError."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from store_helpers import open_store, put_many, segment_paths

from rmq_spark.cli.store_commands import main
from rmq_spark.errors import CheckpointDamagedError


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def _zero_checkpoint_and_abort(root: Path) -> None:
    path = root / "checkpoint"
    data = bytearray(path.read_bytes())
    data[24:40] = bytes(16)  # masterFlushedOffset, confirmPhyOffset: nothing known durable
    path.write_bytes(bytes(data))
    (root / "abort").touch()


def _flip_bit(path: Path, position: int) -> None:
    with path.open("r+b") as handle:
        handle.seek(position)
        byte = handle.read(1)[0]
        handle.seek(position)
        handle.write(bytes([byte ^ 0x10]))


def test_a_flipped_bit_in_the_last_record_is_one_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 30, body_size=150)
    store.close()
    _zero_checkpoint_and_abort(tmp_path)
    last = results[-1]
    segment = segment_paths(tmp_path)[-1]
    _flip_bit(segment, last.physical_offset - int(segment.name) + last.total_size - 5)
    code, out, err = _run(["verify", "--store", str(tmp_path)], capsys)
    assert code == 0 and out[0].startswith("OK 29 records"), (out, err)
    assert "one torn write" in out[0]
    code, out, err = _run(["dump", "--store", str(tmp_path)], capsys)
    assert (code, len(out)) == (0, 29), err
    reopened = open_store(tmp_path)  # recovery cuts the same record
    try:
        assert reopened.recovery_report.end_offset == last.physical_offset
    finally:
        reopened.close()


def test_a_flipped_bit_below_valid_data_is_bad_for_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 30, body_size=150)
    store.close()
    _zero_checkpoint_and_abort(tmp_path)
    victim = results[-3]
    segment = segment_paths(tmp_path)[-1]
    _flip_bit(segment, victim.physical_offset - int(segment.name) + victim.total_size - 5)
    code, out, _ = _run(["verify", "--store", str(tmp_path)], capsys)
    assert code == 1 and "CRC" in out[0], out
    code, _, err = _run(["dump", "--store", str(tmp_path)], capsys)
    assert code == 2 and "CRC" in err, err


@pytest.mark.parametrize("command", ["verify", "dump"])
def test_a_checkpoint_that_is_a_directory_is_one_typed_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    store = open_store(tmp_path)
    put_many(store, 3, body_size=50)
    store.close()
    os.unlink(tmp_path / "checkpoint")
    (tmp_path / "checkpoint").mkdir()
    code, _, err = _run([command, "--store", str(tmp_path)], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "damaged checkpoint" in err and str(tmp_path / "checkpoint") in err
    assert "IsADirectoryError" not in err
    with pytest.raises(CheckpointDamagedError, match="cannot read"):
        open_store(tmp_path)
