"""SparkConfig: how the project's SparkSession is built (the ``[spark]`` config section)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["DRIVER_JITS", "SparkConfig"]

_CATALOGS = ("in-memory", "hive")
DRIVER_JITS = ("full", "quick")
_LOG_LEVELS = ("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")


@dataclass(frozen=True, slots=True)
class SparkConfig:
    master: str = "local[*]"  # Spark master URL: local[*], local[2], spark://host:7077
    app_name: str = "rmq-spark"  # application name shown in the Spark UI and logs
    jars_dir: Path | None = None  # folder with the Delta jars; None: <checkout>/jars
    log_level: str = "WARN"  # Spark's driver log level
    shuffle_partitions: int = 4  # spark.sql.shuffle.partitions (small: a log, not a warehouse)
    ui_enabled: bool = False  # start the Spark web UI
    driver_memory: str = "2g"  # spark.driver.memory (only honoured when Spark starts the JVM)
    driver_jit: str = "full"  # driver JVM's compilers: full (Java's C1 then C2); quick: C1 only
    warehouse_dir: Path | None = None  # spark.sql.warehouse.dir; None: beside metastore_db
    catalog: str = "hive"  # hive: rmq.* persist (in-memory while another JVM has it); in-memory
    metastore_dir: Path | None = None  # Derby's folder; None: <tables_dir>/_catalog/metastore_db
    extra_conf: tuple[str, ...] = ()  # more Spark settings as "key=value" strings

    def __post_init__(self) -> None:
        if not self.master:
            raise ValueError("master: must not be empty")
        if self.log_level.upper() not in _LOG_LEVELS:
            raise ValueError(f"log_level: {self.log_level!r} is not one of {list(_LOG_LEVELS)}")
        if self.driver_jit not in DRIVER_JITS:
            raise ValueError(f"driver_jit: {self.driver_jit!r} is not one of {list(DRIVER_JITS)}")
        if self.catalog not in _CATALOGS:
            raise ValueError(f"catalog: {self.catalog!r} is not one of {list(_CATALOGS)}")
        if self.shuffle_partitions < 1:
            raise ValueError(f"shuffle_partitions: must be >= 1, got {self.shuffle_partitions}")
        for item in self.extra_conf:
            key, sep, _value = item.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"extra_conf: {item!r} is not a key=value string")
