"""RocketMQ's jars: found in their own folder, never in Spark's manifest, fetched once by the
project's script (a second run needs no Maven), and reported by ``rmq-spark doctor``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from namesrv_harness import REPO_ROOT

from rmq_spark.envcheck import ROCKETMQ_JARS_ENV, find_delta_jars, find_rocketmq_jars
from rmq_spark.errors import EnvironmentCheckError


def test_missing_rocketmq_jars_name_the_script(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ROCKETMQ_JARS_ENV, str(tmp_path / "none"))
    with pytest.raises(EnvironmentCheckError, match="fetch_rocketmq_jars.sh"):
        find_rocketmq_jars()


def test_rocketmq_jars_stay_off_sparks_classpath(rocketmq_jars: list[Path]) -> None:
    names = {jar.name for jar in rocketmq_jars}
    assert {"rocketmq-namesrv-5.3.3.jar", "rocketmq-tools-5.3.3.jar"} <= names
    assert not names & {jar.name for jar in find_delta_jars()}
    assert rocketmq_jars[0].parent != find_delta_jars()[0].parent


def test_a_second_fetch_downloads_nothing(rocketmq_jars: list[Path], tmp_path: Path) -> None:
    fake_mvn = tmp_path / "bin" / "mvn"  # a Maven that fails: the cached run must not call it
    fake_mvn.parent.mkdir()
    fake_mvn.write_text("#!/bin/sh\necho mvn was called >&2\nexit 1\n")
    fake_mvn.chmod(0o755)
    env = {
        **os.environ,
        ROCKETMQ_JARS_ENV: str(rocketmq_jars[0].parent),
        "PATH": f"{fake_mvn.parent}:{os.environ['PATH']}",
    }
    done = subprocess.run(
        [str(REPO_ROOT / "scripts" / "fetch_rocketmq_jars.sh")],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "rocketmq jars: cached in" in done.stdout


@pytest.mark.parametrize("present", [True, False])
def test_doctor_reports_the_rocketmq_jars_without_failing(
    rocketmq_jars: list[Path], tmp_path: Path, present: bool
) -> None:
    folder = rocketmq_jars[0].parent if present else tmp_path / "none"
    done = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "doctor"],
        env={**os.environ, ROCKETMQ_JARS_ENV: str(folder)},
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO_ROOT,
    )  # fmt: skip
    line = next(line for line in done.stdout.splitlines() if "rocketmq jars" in line)
    assert line.startswith("ok " if present else "-- "), line
    assert done.returncode == 0, done.stdout
