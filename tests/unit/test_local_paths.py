"""Stores and tables are addressed by a local path or a ``file://`` URI (what Spark users
write), on the CLI and in the source's ``path``; other schemes are refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from source_support import LogWriter, make_record

from rmq_spark.cli.main import main
from rmq_spark.errors import SourceError
from rmq_spark.spark.multi_store import split_paths
from rmq_spark.store.paths import local_fs_path


def test_local_fs_path_forms():
    assert local_fs_path("/data/store") == Path("/data/store")
    assert local_fs_path("relative/store") == Path("relative/store")
    assert local_fs_path("file:///data/my%20store") == Path("/data/my store")
    assert local_fs_path("file:/data/store") == Path("/data/store")
    assert local_fs_path("file://localhost/data/store") == Path("/data/store")
    for bad in ("hdfs://nn:8020/store", "s3a://bucket/store", "file://otherhost/store"):
        with pytest.raises(ValueError, match="only local paths or file:// URIs"):
            local_fs_path(bad)


def test_source_paths_accept_uris(tmp_path):
    assert split_paths(f"file://{tmp_path}/a, {tmp_path}/b") == (
        f"{tmp_path}/a",
        f"{tmp_path}/b",
    )
    with pytest.raises(SourceError, match="only local paths or file:// URIs"):
        split_paths("hdfs://nn/store")


def test_cli_takes_a_file_uri_and_refuses_hdfs(tmp_path, capsys):
    writer = LogWriter(tmp_path / "store")
    writer.extend(make_record(i) for i in range(3))
    assert main(["dump", "--store", f"file://{tmp_path}/store"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    with pytest.raises(SystemExit) as exit_info:
        main(["dump", "--store", "hdfs://nn:8020/store"])
    assert exit_info.value.code == 2
    assert "only local paths or file:// URIs" in capsys.readouterr().err
