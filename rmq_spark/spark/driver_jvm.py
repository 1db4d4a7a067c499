"""The Java options a session's driver JVM starts with, read by spark-submit at its launch:
its thread stack, its compilers (``driver_jit``), its logging configuration and the class-data
archive it maps (``class_archive``); also where the Spark it runs lives (``spark_home``).

Owns those options and why each is there; not the Spark settings around them
(``session.session_conf``) nor when the JVM starts (``session``).
"""

from __future__ import annotations

from pathlib import Path

from rmq_spark.envcheck import repo_root
from rmq_spark.spark.class_archive import archive_option
from rmq_spark.spark.config import SparkConfig

__all__ = ["DRIVER_THREAD_STACK", "QUICK_JIT", "driver_java_options", "logging_option",
           "spark_home"]  # fmt: skip

# On stop(), Spark matches a foreachBatch function's py4j error text (often a whole Java stack
# trace) against a regex whose loop Java's engine runs by recursing once per character
# (StreamExecution.PROXY_ERROR): on the JVM's default 1 MB thread stack about 8,000 characters
# throw StackOverflowError there, and the stream thread dies without a recorded cause. 64 MB
# covers about 500,000; a thread's stack is only reserved, not used, until it grows.
DRIVER_THREAD_STACK = "-Xss64m"
# C1 only: a driver whose heavy work runs in Python workers (the reput job: the log decoded
# into Arrow by the source's tasks) spent more CPU in C2's compiler threads than C2's code
# saved it, on two cores (BENCHMARKS.md, "... the reput job on C1"). Spark's SQL over large
# tables is the opposite case, hence only where chosen (spark.driver_jit, reput.driver_jit).
QUICK_JIT = "-XX:TieredStopAtLevel=1"


def spark_home() -> Path:
    """The Spark installation this driver runs (``SPARK_HOME`` under spark-submit, where
    ``pyspark`` may be imported from ``python/lib/pyspark.zip``)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def logging_option() -> str:
    """``conf/log4j2.properties`` of the checkout for a JVM (driver or executor), or ``""``."""
    log4j = repo_root() / "conf" / "log4j2.properties"
    return f"-Dlog4j2.configurationFile=file:{log4j}" if log4j.is_file() else ""


def driver_java_options(config: SparkConfig, *, class_archive: bool = True) -> str:
    """``spark.driver.extraJavaOptions`` of the project's sessions; ``class_archive=False``:
    without the archive (the run that writes it, a benchmark's baseline)."""
    options = (
        DRIVER_THREAD_STACK,
        QUICK_JIT if config.driver_jit == "quick" else "",
        logging_option(),
        archive_option(spark_home()) if class_archive else "",
    )
    return " ".join(option for option in options if option)
