"""Launcher settings (spark.jars, spark.driver.*, ...) given to build_session reach the JVM's
launch, or are refused in one line when the JVM already runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmq_spark.errors import EnvironmentCheckError
from rmq_spark.spark.session import build_session

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from rmq_spark.spark.config import SparkConfig
from rmq_spark.spark.session import build_session
spark = build_session(SparkConfig(master="local[1]", ui_enabled=False, catalog="in-memory"),
                      extra_conf={"spark.jars": sys.argv[1]})
jvm = spark._jvm
loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
print("FOUND", jvm.java.lang.Class.forName("rmqprobe.Probe", True, loader).getName())
"""


def probe_jar(tmp_path: Path) -> Path:
    source = tmp_path / "src" / "rmqprobe" / "Probe.java"
    source.parent.mkdir(parents=True)
    source.write_text("package rmqprobe; public class Probe {}\n")
    classes = tmp_path / "classes"
    subprocess.run(["javac", "-d", str(classes), str(source)], check=True, timeout=120)
    jar = tmp_path / "probe.jar"
    subprocess.run(["jar", "cf", str(jar), "-C", str(classes), "."], check=True, timeout=120)
    return jar


def test_a_jar_in_extra_conf_is_on_the_drivers_classpath(tmp_path: Path) -> None:
    jar = probe_jar(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(jar)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "FOUND rmqprobe.Probe" in done.stdout, done.stderr[-3000:]


def test_a_launcher_setting_for_a_running_jvm_is_refused_in_one_line(spark) -> None:
    with pytest.raises(EnvironmentCheckError, match=r"^spark.jars.packages is read when the JVM"):
        build_session(extra_conf={"spark.jars.packages": "org.example:absent:1.0"})
    build_session(extra_conf={"spark.sql.shuffle.partitions": "2"})  # a runtime setting: fine


def test_the_projects_own_launcher_settings_reach_the_jvm_it_starts(spark) -> None:
    """The thread stack a stopped foreachBatch stream needs, the log4j config and no console
    progress bar (which the pyspark launcher turns on) are given when the JVM starts: set
    afterwards, they had no effect."""
    from rmq_spark.spark.driver_jvm import DRIVER_THREAD_STACK

    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())
    assert DRIVER_THREAD_STACK in arguments
    assert any(a.startswith("-Dlog4j2.configurationFile=") for a in arguments), arguments
    assert spark.sparkContext.getConf().get("spark.ui.showConsoleProgress") == "false"
