"""rmq-spark: a Spark-native distributed log on Apache RocketMQ's storage format.

The public names below are imported lazily, so ``import rmq_spark`` stays cheap and does not
start importing pyspark or grpc until one of them is used::

    from rmq_spark import Broker, build_session

    with Broker("/tmp/store") as broker:
        broker.send("orders", b"hello", tag="paid", keys=("order-1",))
    spark = build_session()
    spark.read.format("rocketmq").load("/tmp/store").show()
"""

from __future__ import annotations

import importlib
import os
from typing import Any

# grpcio's fork handlers (on by default) abort a forked child now and then while gRPC is busy
# in another thread (SIGABRT after "epoll_wait error: Bad file descriptor"). PySpark starts
# its JVM with a fork (a preexec_fn), so a process with a gRPC client or server in it failed to
# start Spark about one time in ten (tests/foundation/test_fork_beside_grpc.py). Our forks all
# exec at once and use no gRPC in the child. gRPC reads this when it is imported: here, before
# any module of ours imports it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

__all__ = [
    "Broker",
    "MessageStore",
    "Producer",
    "RmqConfig",
    "RmqError",
    "build_session",
    "load_config",
]

__version__ = "0.1.0"

_LAZY = {
    "Broker": "rmq_spark.broker.embedded",
    "MessageStore": "rmq_spark.store.message_store",
    "Producer": "rmq_spark.broker.producer",
    "RmqConfig": "rmq_spark.config",
    "RmqError": "rmq_spark.errors",
    "build_session": "rmq_spark.spark.session",
    "load_config": "rmq_spark.config",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'rmq_spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
