from __future__ import annotations

import subprocess
import sys

import pytest

from rmq_spark.cli.main import build_parser, main


def _subcommands() -> list[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return sorted(action.choices)  # type: ignore[arg-type]


def test_every_subcommand_has_a_help_text(capsys: pytest.CaptureFixture[str]) -> None:
    for name in _subcommands():
        with pytest.raises(SystemExit) as info:
            main([name, "--help"])
        assert info.value.code == 0
        out = capsys.readouterr().out
        assert f"rmq-spark {name}" in out and len(out) > 80


def test_console_script_prints_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "COMMAND" in done.stdout and "doctor" in done.stdout


def test_doctor_reports_a_working_machine(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "ok  java" in out and "delta jars" in out


def test_config_errors_become_one_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--set", "spark.shuffle_partitions=zero"]) == 2
    err = capsys.readouterr().err
    assert "spark.shuffle_partitions" in err and "Traceback" not in err
