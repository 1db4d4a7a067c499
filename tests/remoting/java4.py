"""The RocketMQ 4.9.8 Java client for the remoting tests: its jars (fetched once by
``scripts/fetch_rocketmq4_jars.sh`` into ``jars/rocketmq4/``) and a compiled check program."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from namesrv_harness import REPO_ROOT

from rmq_spark.jvm import java_command

JARS_DIR = Path(os.environ.get("RMQ_SPARK_ROCKETMQ4_JARS", REPO_ROOT / "jars" / "rocketmq4"))
JAVA_DIR = Path(__file__).parent / "java"


def rocketmq4_jars() -> list[Path]:
    """The 4.9.8 client's jars, fetched by the project's script when missing."""
    manifest = JARS_DIR / "manifest.txt"
    if not manifest.is_file():
        subprocess.run(
            [str(REPO_ROOT / "scripts" / "fetch_rocketmq4_jars.sh")], check=True, timeout=1800
        )
    return [JARS_DIR / line.strip() for line in manifest.read_text().splitlines() if line.strip()]


def compile_check(name: str, classes: Path) -> list[Path]:
    """The class path of ``java/<name>.java`` compiled into ``classes``."""
    jars = rocketmq4_jars()
    classes.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["javac", "-d", str(classes), "-cp", os.pathsep.join(map(str, jars)),
         str(JAVA_DIR / f"{name}.java")],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return [*jars, classes]


def run_check(class_path: list[Path], main: str, home: Path, *args: str) -> list[str]:
    """Run ``main`` with ``args``; its stdout lines (which end with ``DONE``)."""
    home.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [*java_command("256m", class_path, f"-Duser.home={home}"), main, *args],
        capture_output=True, text=True, timeout=300, check=False,
        env={"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert lines and lines[-1] == "DONE", f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return lines[:-1]
