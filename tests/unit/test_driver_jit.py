"""The reput job's own session runs its driver JVM on C1 only; every other session keeps Java's
full JIT unless ``spark.driver_jit`` says otherwise."""

from __future__ import annotations

import pytest

from rmq_spark.cli.reput_command import job_spark_config
from rmq_spark.spark.config import SparkConfig
from rmq_spark.spark.driver_jvm import QUICK_JIT
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.session import session_conf


def _driver_options(config: SparkConfig) -> list[str]:
    return session_conf(config)["spark.driver.extraJavaOptions"].split()


def test_a_session_keeps_the_full_jit_by_default() -> None:
    assert QUICK_JIT not in _driver_options(SparkConfig())
    assert QUICK_JIT in _driver_options(SparkConfig(driver_jit="quick"))


def test_the_reput_job_session_runs_c1_only_unless_set_to_full() -> None:
    spark = SparkConfig()
    assert QUICK_JIT in _driver_options(job_spark_config(spark, ReputConfig()))
    full = job_spark_config(spark, ReputConfig(driver_jit="full"))
    assert QUICK_JIT not in _driver_options(full)
    # the thread stack the foreachBatch error text needs is kept either way
    assert "-Xss64m" in _driver_options(full)


@pytest.mark.parametrize("section", [SparkConfig, ReputConfig])
def test_an_unknown_jit_is_refused_by_name(section: type) -> None:
    with pytest.raises(ValueError, match="driver_jit: 'c2' is not one of"):
        section(driver_jit="c2")
