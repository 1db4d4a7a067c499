"""Fixtures for the cluster tests: one real name server per module (a JVM, started under the
bench lock, RocketMQ's jars fetched once) and two rmq-spark brokers registered with it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The name server's harness lives with the remoting tests; imported by its own name (a
# ``remoting`` package name would be shadowed by bench/peers/remoting.py, on sys.path too).
_REMOTING_TESTS = str(Path(__file__).resolve().parents[1] / "remoting")
if _REMOTING_TESTS not in sys.path:
    sys.path.insert(0, _REMOTING_TESTS)

from cluster_harness import ClusterBroker, cluster_brokers  # noqa: E402
from namesrv_harness import REPO_ROOT, Namesrv, start_namesrv  # noqa: E402

from rmq_spark.envcheck import find_rocketmq_jars  # noqa: E402
from rmq_spark.errors import EnvironmentCheckError  # noqa: E402


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
