"""Fixtures of the RocketMQ interop tests: the Java harnesses, built once per session.

``harness`` runs Apache RocketMQ 5.3.3's own store code, ``harness4`` RocketMQ 4.9.8's (see
``rmq_spark/interop.py`` and ``interop/java``). The first build downloads RocketMQ from Maven's
default central repository into ``.cache/m2``; later runs are offline. A missing ``java`` or
``mvn`` fails the tests with a readable message instead of skipping them: these tests are the
proof of compatibility.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rmq_java import JAVA_STORE_MESSAGE_COUNT, JAVA_STORE_SEGMENT_SIZE_BYTES

from rmq_spark.errors import EnvironmentCheckError
from rmq_spark.interop import ROCKETMQ_4, Harness, build_harness


@pytest.fixture(scope="session")
def harness() -> Harness:
    try:
        return build_harness()
    except EnvironmentCheckError as err:
        pytest.fail(f"the RocketMQ interop harness cannot be built: {err}", pytrace=False)


@pytest.fixture(scope="session")
def harness4() -> Harness:
    """The RocketMQ 4.9.8 harness (write-store / read-store only)."""
    try:
        return build_harness(ROCKETMQ_4)
    except EnvironmentCheckError as err:
        pytest.fail(f"the RocketMQ 4.9.8 interop harness cannot be built: {err}", pytrace=False)


@pytest.fixture(scope="session")
def java_store(harness: Harness, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store written by RocketMQ's DefaultMessageStore: its root and what Java reported.

    Returns ``{"root": Path, "puts": [put lines], "shutdown": shutdown line}``. Tests must not
    modify ``root``; copy it first.
    """
    root: Path = tmp_path_factory.mktemp("java-store")
    lines = harness.write_store(root, JAVA_STORE_MESSAGE_COUNT, JAVA_STORE_SEGMENT_SIZE_BYTES)
    puts = [line for line in lines if line["event"] == "put"]
    (shutdown,) = [line for line in lines if line["event"] == "shutdown"]
    return {"root": root, "puts": puts, "shutdown": shutdown}
