"""rmq-spark doctor reports Maven; rmq-spark query refuses a path that is not a store."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_spark.cli.doctor import optional_checks
from rmq_spark.cli.main import main


def test_doctor_reports_maven(capsys: pytest.CaptureFixture[str]) -> None:
    main(["doctor"])
    assert "maven" in capsys.readouterr().out


def test_doctor_says_how_to_get_maven(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn here
    maven = next(check for check in optional_checks() if check[0] == "maven")
    assert maven[1] is False and "mvn not on PATH" in maven[2]


@pytest.mark.parametrize("what", [["--msg-id", "7F00000100002A9F0000000000000000"], ["--key", "k"]])
def test_query_on_a_missing_store_is_one_line(
    what: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert main(["query", "--store", str(missing), "--topic", "t", *what]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"rmq-spark query: error: {missing} is not a store: it does not exist"
    assert not missing.exists()
