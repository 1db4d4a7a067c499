"""Fixtures for the cluster tests: one real name server per module (a JVM, started under the
bench lock, RocketMQ's jars fetched once) and two rmq-spark brokers registered with it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from cluster_harness import ClusterBroker, cluster_brokers
from remoting.namesrv_harness import REPO_ROOT, Namesrv, start_namesrv

from rmq_spark.envcheck import find_rocketmq_jars
from rmq_spark.errors import EnvironmentCheckError


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Namesrv]:
    try:
        find_rocketmq_jars()
    except EnvironmentCheckError:
        subprocess.run([str(REPO_ROOT / "scripts" / "fetch_rocketmq_jars.sh")], check=True,
                       timeout=1800)  # fmt: skip
    started = start_namesrv(tmp_path_factory.mktemp("namesrv") / "work")
    yield started
    started.stop()


@pytest.fixture
def brokers(tmp_path: Path, namesrv: Namesrv) -> Iterator[list[ClusterBroker]]:
    yield from cluster_brokers(tmp_path, namesrv)


@pytest.fixture(scope="session")
def rocketmq(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The official 5.x client, imported with HOME in a temp dir (it logs under ~/logs)."""
    home = tmp_path_factory.mktemp("client-home")
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:
        import rocketmq as module
    finally:
        if saved is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = saved
    return module
