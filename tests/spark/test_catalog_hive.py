"""The default ``[spark] catalog = "hive"``: the reput job's ``rmq.*`` entries persist in the
Hive metastore beside the tables, so a new plain ``spark-sql`` process (the command
``rmq-spark sql --print`` gives) queries ``rmq.messages`` without registering anything; and a
session started while that JVM holds the embedded Derby metastore falls back to the in-memory
catalog with one warning line and still queries ``rmq.messages``."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPARK_HOME = Path(__import__("pyspark").__file__).parent
CLI = [sys.executable, "-m", "rmq_spark.cli.main"]
LOCAL = ["--set", "spark.master=local[1]"]
COUNT = "SELECT count(*) FROM rmq.messages WHERE topic = 'orders'"
# Keeps the spark-sql JVM (and its Derby metastore) up after the count; killed by the test.
HOLD = "SELECT reflect('java.lang.Thread', 'sleep', bigint(600000))"
SECOND_SESSION = """
import sys
from rmq_spark.config import default_config_path, load_config
from rmq_spark.spark.session import build_session
config = load_config(default_config_path(), {"spark.master": "local[1]"})
spark = build_session(config.spark, tables_dir=sys.argv[1])
print(spark.sql(sys.argv[2]).first()[0], flush=True)
"""


def _wait_for(path: Path, text: str, process: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while text not in path.read_text(errors="replace"):
        assert process.poll() is None, path.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"{text!r} never came"
        time.sleep(0.5)


def test_default_catalog_persists_and_a_second_jvm_falls_back(tmp_path: Path) -> None:
    store, tables = tmp_path / "store", tmp_path / "tables"
    with MessageStore.open(StoreConfig(root_dir=store, segment_size_bytes=1 << 20)) as opened:
        opened.put_batch([PutRequest("orders", b"m%d" % i) for i in range(25)])
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_HOME=str(SPARK_HOME))
    reput = subprocess.run(
        [*CLI, "reput", "--store", str(store), "--tables", str(tables), "--available-now", *LOCAL],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert reput.returncode == 0, reput.stderr[-3000:]
    # Registering the tables again (the session registers them, then the job) is quiet: no
    # metastore ERROR with a Java stack trace for a database that is already there.
    assert "AlreadyExistsException" not in reput.stderr, reput.stderr[-3000:]
    assert (tables / "_catalog" / "metastore_db").is_dir()
    assert (tables / "_catalog" / "derby.log").is_file()
    # Nothing lands in the working directory (Derby's and Spark's defaults would).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store", "tables"]

    # A new plain spark-sql process (the command `rmq-spark sql --print` gives, without the
    # registration `rmq-spark sql` adds): the count comes from the metastore.
    printed = subprocess.run(
        [*CLI, "sql", "--tables", str(tables), *LOCAL, "--print", "-e", f"{COUNT}; {HOLD}"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path, check=True,
    )  # fmt: skip
    command = shlex.split(printed.stdout.strip().splitlines()[-1])
    assert command[0].endswith("bin/spark-sql") and "-i" not in command
    out, err = tmp_path / "sql.out", tmp_path / "sql.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        holder = subprocess.Popen(
            command, stdout=stdout, stderr=stderr, env=env, cwd=tmp_path, start_new_session=True
        )
    try:
        _wait_for(out, "25", holder, 300)
        assert "in use by another JVM" not in err.read_text(errors="replace")

        # ... which now holds the embedded metastore: a second session falls back.
        second = subprocess.run(
            [sys.executable, "-c", SECOND_SESSION, str(tables), COUNT],
            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, check=False,
        )  # fmt: skip
        warnings = [line for line in second.stderr.splitlines() if "in use by another JVM" in line]
        assert len(warnings) == 1, second.stderr[-3000:]
        holder_pid = int(warnings[0].split("(pid ")[1].split(")")[0])
        assert os.getpgid(holder_pid) == holder.pid  # the spark-sql JVM started above
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.strip().splitlines()[-1] == "25"
    assert "in-memory catalog" in warnings[0] and "external metastore" in warnings[0]
