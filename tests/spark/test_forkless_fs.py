"""The sessions' local file system forks no process, and answers as Hadoop's own does.

Hadoop's local file system without its native library runs ``chmod`` for every file it
creates and ``readlink`` twice per ``FileContext`` rename: every Delta commit and streaming
checkpoint file of the reput job forked the driver JVM four to six times.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError

from rmq_spark.spark.session import FORKLESS_LOCAL_FS

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]

# A session of its own whose JVM finds these first on PATH: each logs its call, then runs the
# real command. It commits to a Delta table twice (through Delta's log store, FileContext) and
# writes a file through the FileSystem API, as a streaming checkpoint does.
_JOB = textwrap.dedent(
    """
    import sys
    from rmq_spark.spark.config import SparkConfig
    from rmq_spark.spark.session import build_session

    spark = build_session(SparkConfig(master="local[1]", app_name="forkless"))
    table = sys.argv[1]
    spark.range(3).write.format("delta").save(table)
    spark.range(3).write.format("delta").mode("append").save(table)
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"file:{table}-checkpoint/0")
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    fs.create(path, False).close()
    print("FS", fs.getClass().getName(), fs.getRawFileSystem().getClass().getName())
    spark.stop()
    """
)


def _spy_bin(folder: Path, log: Path) -> Path:
    folder.mkdir()
    for command in ("chmod", "readlink"):
        real = subprocess.run(["sh", "-c", f"command -v {command}"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
        script = folder / command
        script.write_text(f'#!/bin/sh\necho "{command} $*" >> {log}\nexec {real} "$@"\n')
        script.chmod(0o755)
    return folder


def test_a_delta_commit_and_a_checkpoint_file_fork_no_process(tmp_path: Path) -> None:
    log = tmp_path / "forks.log"
    log.touch()
    spy = _spy_bin(tmp_path / "bin", log)
    env = dict(
        os.environ,
        PATH=f"{spy}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=str(REPO),
        PYSPARK_PYTHON=sys.executable,
    )
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run(
        [sys.executable, "-c", _JOB, str(tmp_path / "table")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "FS org.rmqspark.hadoop.ForklessLocalFileSystem " in done.stdout, done.stdout
    assert (tmp_path / "table" / "_delta_log" / "00000000000000000001.json").is_file()
    forks = [line for line in log.read_text().splitlines() if str(tmp_path) in line]
    assert forks == [], forks[:10]


def test_the_sessions_use_it_for_both_hadoop_apis(spark) -> None:
    conf = spark._jsc.hadoopConfiguration()
    for key, value in FORKLESS_LOCAL_FS.items():
        assert conf.get(key.removeprefix("spark.hadoop.")) == value


def _file_context(spark):  # noqa: ANN001, ANN202
    jvm = spark._jvm
    return jvm, jvm.org.apache.hadoop.fs.FileContext.getFileContext(
        spark._jsc.hadoopConfiguration()
    )


def test_a_rename_that_would_overwrite_is_refused_and_the_file_kept(spark, tmp_path) -> None:
    """Delta's log store commits a version by a rename that must not overwrite."""
    jvm, fc = _file_context(spark)
    (tmp_path / "new").write_text("new")
    (tmp_path / "committed").write_text("committed")
    none = jvm.org.apache.hadoop.fs.Options.Rename.NONE
    rename_options = spark.sparkContext._gateway.new_array(
        jvm.org.apache.hadoop.fs.Options.Rename, 1
    )
    rename_options[0] = none
    with pytest.raises(Py4JJavaError, match="FileAlreadyExistsException"):
        fc.rename(
            jvm.org.apache.hadoop.fs.Path(f"file:{tmp_path}/new"),
            jvm.org.apache.hadoop.fs.Path(f"file:{tmp_path}/committed"),
            rename_options,
        )
    assert (tmp_path / "committed").read_text() == "committed"
    fc.rename(
        jvm.org.apache.hadoop.fs.Path(f"file:{tmp_path}/new"),
        jvm.org.apache.hadoop.fs.Path(f"file:{tmp_path}/fresh"),
        rename_options,
    )
    assert (tmp_path / "fresh").read_text() == "new" and not (tmp_path / "new").exists()


def _link_answer(fs, path):  # noqa: ANN001, ANN202
    """What ``fs.getFileLinkStatus(path)`` says, comparable across file systems."""
    try:
        status = fs.getFileLinkStatus(path)
    except Py4JJavaError as err:
        return err.java_exception.getClass().getName()
    target = status.getSymlink().toUri().getPath() if status.isSymlink() else None
    return (status.isSymlink(), status.isDirectory(), status.getLen(), target)


def test_link_status_and_permissions_answer_as_hadoop_does(spark, tmp_path) -> None:
    jvm = spark._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    conf = spark._jsc.hadoopConfiguration()
    ours = hadoop_path("file:///").getFileSystem(conf).getRawFileSystem()
    assert ours.getClass().getName() == "org.rmqspark.hadoop.ForklessRawLocalFileSystem"
    hadoops = jvm.org.apache.hadoop.fs.RawLocalFileSystem()
    hadoops.initialize(jvm.java.net.URI("file:///"), conf)
    target = tmp_path / "target"
    target.write_text("x")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "dir-link").symlink_to(tmp_path / "dir")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    answers = []
    for name in ("target", "dir", "link", "dir-link", "dangling", "missing"):
        for spelled in (f"file:{tmp_path}/{name}", f"{tmp_path}/{name}"):  # qualified or not
            path = hadoop_path(spelled)
            answers.append(_link_answer(ours, path))
            assert answers[-1] == _link_answer(hadoops, path), spelled
    assert (True, False, 1, str(target)) in answers  # the unqualified link is seen as one
    assert "java.io.FileNotFoundException" in answers

    _, fc = _file_context(spark)
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission.createImmutable(0o640)
    fc.setPermission(hadoop_path(f"file:{target}"), permission)
    assert target.stat().st_mode & 0o777 == 0o640
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        fc.setPermission(hadoop_path(f"file:{tmp_path}/missing"), permission)
