"""Checks of the machine the project runs on: Java for Spark, the Delta jars, RocketMQ's jars.

Each check raises ``EnvironmentCheckError`` with what is missing and how to get it, so that a
newcomer sees one readable sentence instead of a Py4J trace.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.errors import EnvironmentCheckError

__all__ = [
    "JavaInfo",
    "ROCKETMQ_JARS_ENV",
    "check_java",
    "find_delta_jars",
    "find_rocketmq_jars",
    "java_candidates",
    "repo_root",
]

JAVA_MAJOR_MIN = 17
JARS_MANIFEST = "manifest.txt"
ROCKETMQ_JARS_ENV = "RMQ_SPARK_ROCKETMQ_JARS"  # folder of RocketMQ's jars, if not jars/rocketmq


@dataclass(frozen=True, slots=True)
class JavaInfo:
    executable: str
    major_version: int
    version_text: str


def repo_root() -> Path:
    """The source checkout this package runs from (editable install)."""
    return Path(__file__).resolve().parent.parent


def java_candidates() -> list[str]:
    """The ``java`` executables Spark would run, in its order (``JAVA_HOME``, then ``PATH``),
    those that exist."""
    java_home = os.environ.get("JAVA_HOME")
    candidates = []
    if java_home:
        candidates.append(str(Path(java_home) / "bin" / "java"))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(on_path)
    return [candidate for candidate in candidates if Path(candidate).exists()]


def check_java() -> JavaInfo:
    """Find a Java >= 17 the way Spark does (``JAVA_HOME``, then ``PATH``)."""
    for executable in java_candidates():
        try:
            done = subprocess.run(
                [executable, "-version"], capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise EnvironmentCheckError(f"cannot run {executable} -version: {err}") from err
        text = (done.stderr or done.stdout).strip()
        match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
        if not match:
            continue
        major = int(match.group(1))
        if major == 1 and match.group(2):  # "1.8.0" style
            major = int(match.group(2))
        if major < JAVA_MAJOR_MIN:
            raise EnvironmentCheckError(
                f"Spark 4 needs Java {JAVA_MAJOR_MIN} or newer; {executable} is Java {major}. "
                "Install OpenJDK 17 (Debian: apt-get install openjdk-17-jdk-headless) "
                "or point JAVA_HOME at one."
            )
        # The version's own line: a JVM prints "Picked up JAVA_TOOL_OPTIONS: ..." before it.
        line = next(line for line in text.splitlines() if 'version "' in line)
        return JavaInfo(executable, major, line.strip())
    raise EnvironmentCheckError(
        "Java was not found (JAVA_HOME unset or wrong, no `java` on PATH). Spark needs Java "
        f"{JAVA_MAJOR_MIN}+: install OpenJDK 17 (Debian: apt-get install openjdk-17-jdk-headless)."
    )


def find_delta_jars(jars_dir: Path | None = None) -> list[Path]:
    """The Delta Lake jars fetched by ``make setup`` (listed in ``jars/manifest.txt``)."""
    folder = jars_dir if jars_dir is not None else repo_root() / "jars"
    return _manifest_jars(folder, "the Delta Lake jars", "scripts/fetch_jars.sh")


def find_rocketmq_jars(jars_dir: Path | None = None) -> list[Path]:
    """Apache RocketMQ's name server and admin tools, fetched by ``make setup`` into
    ``jars/rocketmq/`` (or ``$RMQ_SPARK_ROCKETMQ_JARS``); never on Spark's classpath."""
    if jars_dir is None:
        configured = os.environ.get(ROCKETMQ_JARS_ENV)
        jars_dir = Path(configured) if configured else repo_root() / "jars" / "rocketmq"
    return _manifest_jars(jars_dir, "RocketMQ's name server jars", "scripts/fetch_rocketmq_jars.sh")


def _manifest_jars(folder: Path, what: str, script: str) -> list[Path]:
    manifest = folder / JARS_MANIFEST
    if not manifest.is_file():
        raise EnvironmentCheckError(
            f"{what} are not in {folder} (no {JARS_MANIFEST}); run `make setup` "
            f"(or {script}) to fetch them from Maven Central once"
        )
    names = [line.strip() for line in manifest.read_text().splitlines() if line.strip()]
    jars = [folder / name for name in names]
    missing = [str(jar) for jar in jars if not jar.is_file()]
    if missing or not jars:
        raise EnvironmentCheckError(
            f"{what} listed in {manifest} are missing: {missing or 'none listed'}; "
            "run `make setup` again"
        )
    return jars
