"""A typo in a path never creates anything (issue 30, item 6): commands that read refuse a
path that is not a store / tables directory in one line; a reader that closes the pipe early
ends the command quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rmq_spark.cli.main import main


def test_sql_refuses_a_tables_path_with_no_reput_table_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "tabels"
    assert main(["sql", "--tables", str(typo), "-e", "SELECT 1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"rmq-spark sql: error: {typo} is not a reput tables directory: it does not exist "
        "(messages, message_index, consume_queue); run `rmq-spark reput` first"
    )
    assert not typo.exists()


def test_a_closed_pipe_ends_a_command_quietly(tmp_path: Path) -> None:
    store = tmp_path / "store"
    send = [sys.executable, "-m", "rmq_spark.cli.main", "send", "--create", "--store", str(store)]
    lines = "".join(f"m{i}\n" for i in range(2_000))
    subprocess.run(
        [*send, "--topic", "T", "--stdin"], input=lines, text=True, check=True, capture_output=True
    )
    dump = subprocess.Popen(
        [sys.executable, "-m", "rmq_spark.cli.main", "dump", "--store", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert dump.stdout is not None and dump.stdout.readline()
    dump.stdout.close()  # as `| head -1` does
    _, err = dump.communicate(timeout=60)
    assert dump.returncode == 141 and b"Traceback" not in err, err
