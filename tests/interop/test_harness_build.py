"""Building the Java harness: missing tools are clear errors (never a skip), and an up-to-date
harness is reused without Maven."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rmq_spark.envcheck import check_java
from rmq_spark.errors import EnvironmentCheckError
from rmq_spark.interop import Harness, build_harness, default_harness_dir


def _copy_sources(tmp_path: Path) -> Path:
    target = tmp_path / "harness"
    target.mkdir()
    shutil.copy(default_harness_dir() / "pom.xml", target / "pom.xml")
    shutil.copytree(default_harness_dir() / "src", target / "src")
    return target


def test_missing_maven_is_a_clear_error_when_a_build_is_needed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    java_home = Path(check_java().executable).resolve().parent.parent
    harness_dir = _copy_sources(tmp_path)  # never built: needs mvn
    monkeypatch.setenv("JAVA_HOME", str(java_home))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(EnvironmentCheckError, match="Maven .*mvn.* is not on PATH"):
        build_harness(harness_dir=harness_dir, maven_repo=tmp_path / "m2")


def test_missing_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(EnvironmentCheckError, match="Java was not found"):
        build_harness(harness_dir=_copy_sources(tmp_path), maven_repo=tmp_path / "m2")


@pytest.mark.slow
def test_a_built_harness_is_reused_without_maven(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    java_home = Path(check_java().executable).resolve().parent.parent
    monkeypatch.setenv("JAVA_HOME", str(java_home))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no mvn: a rebuild would fail
    reused = build_harness()
    assert reused.classpath == harness.classpath
    assert reused.version() == "V5_3_3"
