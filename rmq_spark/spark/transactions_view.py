"""The ``transactions`` view: every transaction of a store and its state, for joins with the
messages (``uniq_key``).

One row per transaction (real topic, UNIQ_KEY), from the store's records read with
``isolation=read_uncommitted``: its first half's CommitLog offset and born time, how often the
check-back asked about it (the largest TRANSACTION_CHECK_TIMES of its halves and re-puts) and
its ``state`` by ``store/tx_states.py``'s rule (a COMMIT record of it in its topic, then a copy
in TRANS_CHECK_MAX_TIME_TOPIC, then an op marker naming one of its halves; else pending).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq_spark.spark.isolation import READ_UNCOMMITTED
from rmq_spark.store.layout import (
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
)
from rmq_spark.store.tx_states import PENDING, PRECEDENCE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["register_transactions_view", "transactions_frame"]


def transactions_frame(spark: SparkSession, store_path: str) -> DataFrame:
    """The view's rows for the store at ``store_path`` (see the module docstring)."""
    from pyspark.sql import functions as F  # noqa: N812

    raw = spark.read.format("rocketmq").option("isolation", READ_UNCOMMITTED).load(store_path)
    real = F.col("properties").getItem("REAL_TOPIC")
    checks = F.coalesce(
        F.col("properties").getItem("TRANSACTION_CHECK_TIMES").cast("int"), F.lit(0)
    )
    halves = raw.where(F.col("topic") == RMQ_SYS_TRANS_HALF_TOPIC).select(
        real.alias("topic"), "uniq_key", "physical_offset", "queue_offset", "born_timestamp",
        checks.alias("checks"),
    )  # fmt: skip
    ops = (
        raw.where(F.col("topic") == RMQ_SYS_TRANS_OP_HALF_TOPIC)
        .select(F.explode(F.split(F.col("body").cast("string"), ",")).alias("offset"))
        .select(F.trim("offset").cast("long").alias("op_offset"))
        .where(F.col("op_offset").isNotNull())
        .distinct()
    )
    resolved = halves.join(ops, halves.queue_offset == ops.op_offset).select(
        "topic", "uniq_key", F.lit(True).alias("resolved")
    )
    commits = raw.where(F.col("sys_flag").bitwiseAND(0xC) == 0x8).select(
        "topic", "uniq_key", F.col("physical_offset").alias("commit_offset")
    )
    discards = raw.where(F.col("topic") == TRANS_CHECK_MAX_TIME_TOPIC).select(
        real.alias("topic"), "uniq_key", F.lit(True).alias("discarded")
    )
    per_key = halves.groupBy("topic", "uniq_key").agg(
        F.min("physical_offset").alias("half_offset"),
        F.min("born_timestamp").alias("born_timestamp"),
        F.max("checks").alias("check_count"),
    )
    keys = ["topic", "uniq_key"]
    joined = (
        per_key.join(resolved.distinct(), keys, "left")
        .join(
            commits.groupBy(*keys).agg(F.min("commit_offset").alias("commit_offset")), keys, "left"
        )
        .join(discards.distinct(), keys, "left")
    )
    evidence = {
        "committed": F.col("commit_offset").isNotNull(),
        "discarded": F.col("discarded"),
        "resolved": F.col("resolved"),
    }
    state = None
    for name, flag in PRECEDENCE:  # store/tx_states.py's rule, as Spark columns
        state = F.when(evidence[flag], name) if state is None else state.when(evidence[flag], name)
    assert state is not None
    state = state.otherwise(PENDING)
    return joined.select(
        "topic", "uniq_key", "half_offset", "born_timestamp", "check_count",
        state.alias("state"), "commit_offset",
    )  # fmt: skip


def register_transactions_view(
    spark: SparkSession, store_path: str, name: str = "transactions"
) -> DataFrame:
    """``transactions_frame`` as the temporary view ``name``; returns the frame."""
    frame = transactions_frame(spark, store_path)
    frame.createOrReplaceTempView(name)
    return frame
