"""The driver JVM maps the class-data archive ``make setup`` wrote, and only a matching one.

A session's JVM loaded and verified Spark's and Delta's classes from their jars at every
start (~6 s here); with the archive it maps them (~4 s).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rmq_spark.spark.class_archive import (
    QUIET_OPTION,
    archive_option,
    archive_path,
    java_executable,
)
from rmq_spark.spark.driver_jvm import spark_home


def _fake_spark(folder: Path) -> Path:
    (folder / "jars").mkdir(parents=True)
    for name in ("spark-core.jar", "delta-spark.jar"):
        (folder / "jars" / name).write_bytes(b"PK")
    return folder


def test_the_archive_is_named_by_the_jdk_and_each_jar(tmp_path: Path) -> None:
    home = _fake_spark(tmp_path / "spark")
    java = java_executable()
    assert java is not None
    first = archive_path(home, java)
    assert first == archive_path(home, java)
    assert first.parent == home / "rmq-spark-class-archive"

    jar = home / "jars" / "delta-spark.jar"
    os.utime(jar, ns=(0, jar.stat().st_mtime_ns + 1_000_000_000))
    touched = archive_path(home, java)
    jar.write_bytes(b"PK and more")
    grown = archive_path(home, java)
    (home / "jars" / "extra.jar").write_bytes(b"PK")
    added = archive_path(home, java)
    other_jdk = archive_path(home, tmp_path / "jdk" / "bin" / "java")
    assert len({first, touched, grown, added, other_jdk}) == 5


def test_a_session_names_the_archive_only_when_it_is_there(tmp_path: Path) -> None:
    home = _fake_spark(tmp_path / "spark")
    assert archive_option(home) == ""
    path = archive_path(home)
    path.parent.mkdir()
    path.write_bytes(b"archive")
    assert archive_option(home) == f"-XX:SharedArchiveFile={path} {QUIET_OPTION}"


def test_a_jvm_that_declines_the_archive_says_nothing_and_runs() -> None:
    """A user's classpath in front of Spark's makes the JVM decline the archive: it must
    start as without it, not print a warning into the user's console."""
    path = archive_path(spark_home())
    if path is None or not path.is_file():
        pytest.fail(f"no class-data archive at {path}: `make setup` writes it")
    java = str(java_executable())
    base = [java, f"-XX:SharedArchiveFile={path}", "-version"]
    loud = subprocess.run(base, capture_output=True, text=True, timeout=60, check=False)
    assert "Unable to use shared archive" in loud.stdout + loud.stderr  # declined: no classpath
    quiet = subprocess.run(
        [*base[:2], QUIET_OPTION, "-version"], capture_output=True, text=True, timeout=60
    )
    assert quiet.returncode == 0
    assert "warning" not in quiet.stdout + quiet.stderr
    assert "version" in quiet.stderr


@pytest.mark.spark
def test_the_session_driver_maps_the_archive_make_setup_wrote(spark) -> None:  # noqa: ANN001
    path = archive_path(spark_home())
    if path is None or not path.is_file():
        pytest.fail(f"no class-data archive at {path}: `make setup` writes it")
    jvm = spark.sparkContext._gateway.proc.pid
    maps = Path(f"/proc/{jvm}/maps").read_text()
    assert str(path) in maps, f"the driver JVM (pid {jvm}) did not map {path}"
