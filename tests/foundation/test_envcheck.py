from __future__ import annotations

from pathlib import Path

import pytest

from rmq_spark.envcheck import check_java, find_delta_jars
from rmq_spark.errors import EnvironmentCheckError


def test_missing_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EnvironmentCheckError, match="Java was not found"):
        check_java()


def test_old_java_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'openjdk version \"1.8.0_392\"' >&2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(EnvironmentCheckError, match="is Java 8"):
        check_java()


def test_installed_java_is_found() -> None:
    assert check_java().major_version >= 17


def test_the_version_text_is_the_version_line_when_java_tool_options_are_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The JVM prints "Picked up JAVA_TOOL_OPTIONS: ..." first; `doctor` shows the version.
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Xss2m")
    assert 'version "' in check_java().version_text


def test_missing_jars_say_how_to_fetch_them(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentCheckError, match="make setup"):
        find_delta_jars(tmp_path)


def test_fetched_jars_include_delta_spark() -> None:
    names = [jar.name for jar in find_delta_jars()]
    assert any(name.startswith("delta-spark_2.13-") for name in names)
