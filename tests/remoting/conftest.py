"""Fixtures for the remoting tests: RocketMQ's jars (fetched once, cached) and one real
NameServer (``rmq-spark namesrv``) shared by a test module."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from namesrv_harness import REPO_ROOT, Namesrv, start_namesrv

from rmq_spark.envcheck import find_rocketmq_jars
from rmq_spark.errors import EnvironmentCheckError


@pytest.fixture(scope="session")
def rocketmq_jars() -> list[Path]:
    """RocketMQ's name server and tools jars, fetched by the project's own script if missing."""
    try:
        return find_rocketmq_jars()
    except EnvironmentCheckError:
        subprocess.run(
            [str(REPO_ROOT / "scripts" / "fetch_rocketmq_jars.sh")], check=True, timeout=1800
        )
        return find_rocketmq_jars()


@pytest.fixture(scope="module")
def namesrv(
    rocketmq_jars: list[Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Namesrv]:
    started = start_namesrv(tmp_path_factory.mktemp("namesrv") / "work")
    yield started
    started.stop()  # SIGTERM, passed on to the JVM: a clean stop
