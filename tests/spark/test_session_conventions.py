"""Spark's own conventions win over the project's ``[spark]`` config (``build_session``):
a master and app name given to ``spark-submit`` or ``pyspark`` are kept, and an existing
session without Delta is refused with the settings it lacks. Each case runs in its own
Python process (a JVM each), as a user's job would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
from rmq_spark.spark.config import SparkConfig
from rmq_spark.spark.session import build_session
spark = build_session(SparkConfig(master="local[2]", app_name="from-config", log_level="ERROR"))
print("MASTER", spark.sparkContext.master)
print("APP", spark.sparkContext.appName)
print("EXT", spark.conf.get("spark.sql.extensions"))
print("ROWS", spark.read.format("rocketmq").load(r"{store}").count())
spark.stop()
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")}
    env.update(PYTHONPATH=str(REPO), PYSPARK_PYTHON=sys.executable)
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def _lines(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    from rmq_spark.store.config import StoreConfig
    from rmq_spark.store.message_store import MessageStore
    from rmq_spark.store.put import PutRequest

    with MessageStore.open(StoreConfig(root_dir=tmp_path / "store")) as opened:
        opened.put_batch([PutRequest("T", b"x"), PutRequest("T", b"y")])
    return tmp_path / "store"


def test_spark_submit_master_and_name_are_kept(tmp_path: Path, store: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT.format(store=store))
    submit = Path(sys.executable).parent / "spark-submit"
    done = subprocess.run(
        [str(submit), "--master", "local[1]", "--name", "from-submit", str(script)],
        capture_output=True, text=True, timeout=300, env=_env(), check=False,
    )  # fmt: skip
    got = _lines(done)
    assert got["MASTER"] == "local[1]"
    assert got["APP"] == "from-submit"
    assert "io.delta.sql.DeltaSparkSessionExtension" in got["EXT"]
    assert got["ROWS"] == "2"


def test_pyspark_submit_args_are_kept(store: Path) -> None:
    env = _env()
    env["PYSPARK_SUBMIT_ARGS"] = "--master local[1] --name from-pyspark pyspark-shell"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(store=store)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    got = _lines(done)
    assert (got["MASTER"], got["APP"]) == ("local[1]", "from-pyspark")


def test_an_existing_session_without_delta_is_refused_clearly() -> None:
    code = (
        "from pyspark.sql import SparkSession\n"
        "SparkSession.builder.master('local[1]').getOrCreate()\n"
        "from rmq_spark.spark.session import build_session\n"
        "from rmq_spark.errors import EnvironmentCheckError\n"
        "try:\n"
        "    build_session()\n"
        "except EnvironmentCheckError as err:\n"
        "    print('REFUSED', err)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, timeout=300, env=_env(), check=False,
    )  # fmt: skip
    got = _lines(done)
    assert "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension" in got["REFUSED"]
    assert "spark.sql.catalog.spark_catalog" in got["REFUSED"]
