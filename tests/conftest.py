"""Shared fixtures: the one session-scoped SparkSession (local[2], UI off, 2 shuffle partitions),
and the official RocketMQ Python client (``rocketmq``), imported once.

Each Spark test gets its own ``tmp_path`` for checkpoints and tables; the session is shared
because starting a JVM costs seconds [Delta's DeltaTestCase does the same].
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

import rmq_spark  # noqa: F401  before any test module imports grpc (rmq_spark/__init__.py)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The suite's Spark drivers (sessions, spark-submit, spark-sql) live for seconds to a minute:
# C2 compilation was up to half of their CPU on CI's two cores and pays off in none of them,
# and G1's concurrent threads add to it. Tests only: the product and the benchmarks run with
# the JVM's defaults, as do the suite's RocketMQ, Kafka and Java-client JVMs (C1 code made
# their longer runs slower). Set before any session starts; a value already set is kept.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


class _MainThreadKeepsALoop(asyncio.DefaultEventLoopPolicy):
    """asyncio's policy, except that the main thread always has a loop to be asked for.

    The official Python client builds gRPC calls on the main thread at times (a route
    answer's callback runs there when the answer came first), and grpc.aio then asks for the
    main thread's loop. A fresh process has one; after any ``asyncio.run`` (unit tests and the
    cluster-discovery code run it in the test worker) the main thread has none, and a client
    started by a later test in that worker failed at random. This hands the main thread one
    spare loop again, as a fresh process would."""

    def __init__(self) -> None:
        super().__init__()
        self._spare: asyncio.AbstractEventLoop | None = None

    def get_event_loop(self) -> asyncio.AbstractEventLoop:
        try:
            return super().get_event_loop()
        except RuntimeError:
            if threading.current_thread() is not threading.main_thread():
                raise
        if self._spare is None or self._spare.is_closed():
            self._spare = self.new_event_loop()
        self.set_event_loop(self._spare)
        return self._spare


asyncio.set_event_loop_policy(_MainThreadKeepsALoop())


@pytest.fixture(scope="session")
def rocketmq(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The official client package, imported with HOME in a temp dir (it logs under ~/logs)."""
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


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    from rmq_spark.spark.config import SparkConfig
    from rmq_spark.spark.session import build_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = build_session(
        SparkConfig(
            master="local[2]",
            app_name="rmq-spark-tests",
            shuffle_partitions=2,
            ui_enabled=False,
            log_level="ERROR",
            warehouse_dir=warehouse,
            # Tests register their tables per tmp dir; a Hive metastore would only add its
            # start (seconds) and a Derby round trip per catalog call. The catalog's own
            # tests start their JVMs with the default ("hive").
            catalog="in-memory",
            extra_conf=(
                "spark.sql.streaming.stopTimeout=30s",
                "spark.databricks.delta.properties.defaults.checkpointInterval=1000",
            ),
        )
    )
    yield session
    session.stop()


# --- the order of a parallel run (make test: -n 2 --dist loadfile; tests/xdist_order.py) ------


def _on_a_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _on_a_worker(config) and config.getoption("dist", "no") == "no":
        from xdist_order import longest_first

        order = longest_first([item.nodeid for item in items], config.rootpath)
        rank = {nodeid: at for at, nodeid in enumerate(order)}
        items.sort(key=lambda item: rank[item.nodeid])


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist_order import ModulesInOrder

    return ModulesInOrder(config, log)
