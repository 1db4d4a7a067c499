"""The one place that builds the project's SparkSession (jobs, tests, notebooks, the CLI).

It checks Java first, puts the cached Delta Lake jars on the classpath, enables the Delta SQL
extension and catalog, keeps Spark's logging readable (``conf/log4j2.properties``) and
registers the ``rocketmq`` data source. It does not create tables or start queries.

Spark's own conventions win: a master, app name or setting given to ``spark-submit``,
``pyspark`` (``PYSPARK_SUBMIT_ARGS``) or ``spark-defaults.conf`` is kept, and the project's
``[spark]`` config fills in only what is unset (Delta's SQL extension is appended to the
user's extensions, its jars to ``spark.jars``). An existing session (the pyspark shell, a
notebook's prebuilt ``spark``) is reused as it is; without Delta it is refused with the two
settings it lacks, instead of failing later with "Table does not support reads".

A session that names its tables (``tables_dir``) keeps ``rmq.*`` in the Hive metastore beside
them (``catalog.py``); when another JVM holds that embedded metastore, it falls back to the
in-memory catalog and registers the tables, with one warning line saying why.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmq_spark.envcheck import check_java, find_delta_jars, repo_root
from rmq_spark.errors import EnvironmentCheckError
from rmq_spark.spark.catalog import (
    IMPLEMENTATION,
    catalog_conf,
    derby_log_option,
    metastore_in_use,
)
from rmq_spark.spark.config import SparkConfig
from rmq_spark.spark.driver_jvm import driver_java_options, logging_option, spark_home

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rmq_spark.spark.tables import StoreLayout

__all__ = ["build_session", "jvm_gone", "merged_conf", "session_conf", "stop_session"]

_log = logging.getLogger(__name__)
_LISTS = {"spark.sql.extensions": ",", "spark.jars": ","}  # merged, not replaced
# Read by spark-submit when it starts the JVM (classpath, JVM options, Ivy): set afterwards,
# Spark keeps them without effect (a jar in spark.jars never reaches the driver's classpath).
LAUNCHER_SETTINGS = (
    "spark.driver.defaultJavaOptions",
    "spark.driver.extraClassPath",
    "spark.driver.extraJavaOptions",
    "spark.driver.extraLibraryPath",
    "spark.driver.memory",
    "spark.jars",
    "spark.jars.excludes",
    "spark.jars.ivy",
    "spark.jars.ivySettings",
    "spark.jars.packages",
    "spark.jars.repositories",
)

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


FORKLESS_FS_JAR = "rmq-spark-hadoop-fs.jar"  # built by `make setup` (jvm/hadoop-fs)
# Without Hadoop's native library (pyspark ships none), Hadoop's local file system forks
# `chmod` for each file it creates and `readlink` twice per FileContext rename: four to six
# forks of the driver JVM per Delta commit (its log entry and checksum), a few ms each, and
# about 40 a second from the reput job at 2,000 msgs/s. These classes do the same through
# java.nio (jvm/hadoop-fs); the renames, checks and checksums stay Hadoop's.
FORKLESS_LOCAL_FS = {
    "spark.hadoop.fs.file.impl": "org.rmqspark.hadoop.ForklessLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.rmqspark.hadoop.ForklessLocalFs",
}


def session_conf(config: SparkConfig, *, tables_dir: str | Path | None = None) -> dict[str, str]:
    """The Spark settings ``build_session`` applies, as strings (also used for spark-submit
    and ``rmq-spark sql``); ``tables_dir`` places the Hive metastore (``catalog_conf``)."""
    jars = _delta_jars(config.jars_dir)
    conf = {
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.sql.shuffle.partitions": str(config.shuffle_partitions),
        "spark.ui.enabled": str(config.ui_enabled).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": config.driver_memory,
        # A busy 2-core machine can starve the local executor's heartbeat past Spark's 120 s
        # default; losing the executor then fails a batch that would have succeeded.
        "spark.network.timeout": "600s",
        "spark.executor.heartbeatInterval": "60s",
        # Streaming checkpoints (offset and commit logs, state) through Hadoop's FileSystem
        # API instead of FileContext: without Hadoop's native library, FileContext's rename on
        # a local disk runs `readlink` in a subprocess four times per file (~25 ms per
        # micro-batch log write here); FileSystem renames in-process. Same guarantees: both
        # refuse to overwrite an existing batch file (exists check, then rename; HDFS's rename
        # itself refuses). Delta commits through its LogStore, not this class (it only writes its
        # version checksum files with it).
        "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER,
        # Delta writes small logs often; these keep a local log store quick and quiet.
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    }
    fs_jar = _forkless_fs_jar()
    if fs_jar is not None:
        conf.update(FORKLESS_LOCAL_FS)
        jars = [*jars, fs_jar]
    if jars and not _jars_in_pyspark(jars):
        # `make setup` links the jars into pyspark/jars (needed by spark-submit); when they
        # are not there, the session started from Python still gets them this way.
        conf["spark.jars"] = ",".join(str(jar) for jar in jars)
    conf["spark.driver.extraJavaOptions"] = driver_java_options(config)
    if logging_option():
        conf["spark.executor.extraJavaOptions"] = logging_option()
    if config.warehouse_dir is not None:
        conf["spark.sql.warehouse.dir"] = str(config.warehouse_dir)
    conf.update(catalog_conf(config, tables_dir))
    for item in config.extra_conf:
        key, _, value = item.partition("=")
        conf[key.strip()] = value.strip()
    return conf


def build_session(
    config: SparkConfig | None = None,
    *,
    master: str | None = None,
    app_name: str | None = None,
    extra_conf: Mapping[str, str] | None = None,
    tables_dir: str | Path | None = None,
    database: str = "rmq",
    tables_layout: StoreLayout | None = None,
) -> SparkSession:
    """Build (or get) the project's SparkSession.

    Parameters
    ----------
    config
        The ``[spark]`` config section; defaults apply when ``None``.
    master, app_name
        Override the config (e.g. ``spark://host:7077`` for a real cluster).
    extra_conf
        More Spark settings, applied last.
    tables_dir, database
        When given, the reput tables under ``tables_dir`` are registered as
        ``<database>.consume_queue`` / ``.message_index`` / ``.messages`` (created empty if
        missing), so SQL sees them in this session. With ``catalog = "hive"`` (the default)
        the entries live in the metastore at ``<tables_dir>/_catalog`` and outlive the
        session; if another JVM holds that metastore, this session uses the in-memory catalog
        (one warning line). ``tables_layout``: the layout of tables created missing (a job
        over several stores: ``StoreOfSeveral``; default one store's).

    Returns
    -------
    pyspark.sql.SparkSession
        With Delta enabled and the ``rocketmq`` source registered.

    Raises
    ------
    EnvironmentCheckError
        Java or the Delta jars are missing; the message says how to fix it.
    """
    from pyspark.sql import SparkSession

    config = config or SparkConfig()
    check_java()
    existing = SparkSession.getActiveSession()
    if existing is not None:
        spark = existing
        _require_launched(_launcher_conf(config, extra_conf))
        require_delta(spark)
        _log.info("reusing the active SparkSession (master %s): the [spark] config does not "
                  "apply to it", spark.sparkContext.master)  # fmt: skip
    else:
        spark = _new_session(config, master, app_name, extra_conf, tables_dir)
        spark.sparkContext.setLogLevel(config.log_level.upper())
    _register_sources(spark)
    if tables_dir is not None:
        from rmq_spark.spark.tables import register_tables

        if tables_layout is None:
            register_tables(spark, tables_dir, database)
        else:
            register_tables(spark, tables_dir, database, tables_layout)
    return spark


def _new_session(
    config: SparkConfig,
    master: str | None,
    app_name: str | None,
    extra_conf: Mapping[str, str] | None,
    tables_dir: str | Path | None,
) -> SparkSession:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    # SparkContext takes the Python of its workers (UDFs, the rocketmq source) from
    # PYSPARK_PYTHON, else `python3` on PATH, which may lack our dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    ours = session_conf(config, tables_dir=tables_dir)
    _start_jvm(_launcher_conf(config, extra_conf), _launcher_part(ours))
    given = dict(SparkConf().getAll())  # what spark-submit, pyspark and spark-defaults set
    ours["spark.master"] = config.master
    ours["spark.app.name"] = config.app_name
    conf = merged_conf(given, ours)
    if master:  # an explicit argument (a CLI flag) beats everything
        conf["spark.master"] = master
    if app_name:
        conf["spark.app.name"] = app_name
    conf.update(extra_conf or {})
    _choose_catalog(conf, tables_dir)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    _quiet_accumulator_server(spark.sparkContext)
    return spark


def _quiet_accumulator_server(context: Any) -> None:
    """PySpark's accumulator server prints a traceback (socketserver's) when the driver's JVM
    drops its connection, as it does when it ends with a TERM to the job's process group:
    the job says that itself, in one line (``jvm_gone``); the details at DEBUG."""
    server = getattr(context, "_accumulatorServer", None)
    if server is None:
        return

    def handle_error(_request: Any, client_address: Any) -> None:
        _log.debug("the JVM's accumulator connection %s broke", client_address, exc_info=True)

    server.handle_error = handle_error


def stop_session(spark: SparkSession) -> None:
    """``spark.stop()``; a driver JVM already gone (``jvm_gone``) leaves nothing to
    stop."""
    try:
        spark.stop()
    except Exception as err:
        if not jvm_gone(err):
            raise
        _log.debug("the Spark session's JVM had ended already: %s", err)


def _launcher_conf(config: SparkConfig, extra_conf: Mapping[str, str] | None) -> dict[str, str]:
    """The launcher settings the caller gave (``extra_conf``, the ``[spark]`` extra settings)."""
    given = dict(item.partition("=")[::2] for item in config.extra_conf)
    given.update(extra_conf or {})
    return {
        key.strip(): value.strip()
        for key, value in given.items()
        if key.strip() in LAUNCHER_SETTINGS
    }


# Given at launch too: the pyspark shell's launcher turns the console progress bar on, and
# a setting given at launch is kept over ours (merged_conf).
_AT_LAUNCH = (*LAUNCHER_SETTINGS, "spark.ui.showConsoleProgress")


def _launcher_part(conf: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in conf.items() if key in _AT_LAUNCH}


def _start_jvm(launcher: Mapping[str, str], project: Mapping[str, str]) -> None:
    """Start the JVM with ``launcher`` over the ``project``'s own launcher settings
    (PYSPARK_SUBMIT_ARGS still wins: it comes after), or join the one spark-submit / pyspark
    started, which must already have ``launcher`` (the project's are then theirs to give)."""
    from pyspark import SparkConf, SparkContext

    if SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        conf = SparkConf(loadDefaults=False)
        for key, value in {**project, **launcher}.items():
            conf.set(key, value)
        SparkContext._ensure_initialized(conf=conf)
        return
    SparkContext._ensure_initialized()
    _require_launched(launcher)


def _require_launched(launcher: Mapping[str, str]) -> None:
    """Refuse launcher settings the running JVM was not started with.

    Raises
    ------
    EnvironmentCheckError
        Naming the first such setting and how to pass it.
    """
    from pyspark import SparkConf

    running = dict(SparkConf().getAll())
    for key, value in sorted(launcher.items()):
        have = running.get(key, "")
        if key in _LISTS:  # spark-submit turns a path into a file: URI
            sep = _LISTS[key]
            wanted = {item.removeprefix("file:") for item in value.split(sep) if item}
            if wanted <= {item.removeprefix("file:") for item in have.split(sep)}:
                continue
        elif have == value:
            continue
        raise EnvironmentCheckError(
            f"{key} is read when the JVM starts, and this process's JVM is already running "
            f"(spark-submit, pyspark or an earlier session); pass --conf {key}={value} to "
            "spark-submit / pyspark (or in PYSPARK_SUBMIT_ARGS before Python starts Spark)"
        )


def merged_conf(given: Mapping[str, str], ours: Mapping[str, str]) -> dict[str, str]:
    """The settings a new session gets: ``given`` (Spark's: spark-submit, pyspark,
    spark-defaults) kept, ``ours`` filling in the rest; list settings (Delta's extension, its
    jars) merged.

    Examples
    --------
    >>> merged_conf({"spark.master": "spark://h:7077", "spark.sql.extensions": "x.Ext"},
    ...             {"spark.master": "local[*]", "spark.sql.extensions": "d.Delta"})
    {'spark.master': 'spark://h:7077', 'spark.sql.extensions': 'x.Ext,d.Delta'}
    """
    conf = dict(given)
    for key, value in ours.items():
        if key not in conf:
            conf[key] = value
        elif key in _LISTS:
            sep = _LISTS[key]
            items = [item for item in conf[key].split(sep) if item]
            items += [item for item in value.split(sep) if item and item not in items]
            conf[key] = sep.join(items)
        elif conf[key] != value:
            _log.debug(
                "Spark setting %s=%s kept (the [spark] config says %s)", key, conf[key], value
            )
    return conf


def require_delta(spark: SparkSession) -> None:
    """Refuse a session without Delta Lake, naming what it lacks.

    Raises
    ------
    EnvironmentCheckError
        Delta's SQL extension or catalog is not configured in ``spark``.
    """
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    catalog = spark.conf.get("spark.sql.catalog.spark_catalog", "") or ""
    if DELTA_EXTENSION in extensions.split(",") and catalog == DELTA_CATALOG:
        return
    raise EnvironmentCheckError(
        "this SparkSession was started without Delta Lake; start it with "
        f"--conf spark.sql.extensions={DELTA_EXTENSION} "
        f"--conf spark.sql.catalog.spark_catalog={DELTA_CATALOG} and the Delta jars "
        "(--jars from `make setup`'s jars/ or --packages io.delta:delta-spark_2.13:<version>), "
        "or call rmq_spark.spark.session.build_session() before any other session is created"
    )


def _register_sources(spark: SparkSession) -> None:
    from rmq_spark.spark import source

    source.register(spark)


def _choose_catalog(conf: dict[str, str], tables_dir: str | Path | None) -> None:
    """Fall back to the in-memory catalog when another JVM holds the embedded metastore
    (Derby would refuse this session at its first query), and keep ``derby.log`` out of the
    working directory."""
    from pyspark import SparkContext

    in_use = metastore_in_use(conf, _own_jvm_pids())
    if in_use is not None:
        conf[IMPLEMENTATION] = "in-memory"
        then = (
            f"rmq.* registered from {Path(tables_dir).absolute()}"
            if tables_dir is not None
            else "rmq.* not registered (pass tables_dir)"
        )
        _log.warning(
            "%s (embedded Derby admits one JVM at a time): this session uses the in-memory "
            "catalog, %s; for concurrent jobs on one catalog configure an external metastore "
            "(docs/TABLES.md, Catalog)",
            in_use.describe(),
            then,
        )
        return
    option = derby_log_option(conf)
    jvm = SparkContext._jvm
    if option is not None and jvm is not None:
        name, path = option
        path.parent.mkdir(parents=True, exist_ok=True)
        if jvm.java.lang.System.getProperty(name) is None:  # a -D given by the user wins
            jvm.java.lang.System.setProperty(name, str(path))


def _own_jvm_pids() -> set[int]:
    """This driver's JVM: PySpark's child, or the parent that spark-submit started us from."""
    from pyspark import SparkContext

    pids = set()
    process = getattr(SparkContext._gateway, "proc", None)
    if process is not None:
        pids.add(process.pid)
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        pids.add(os.getppid())
    return pids


def jvm_gone(err: BaseException) -> bool:
    """Whether ``err`` is py4j finding the driver's JVM gone. PySpark starts the JVM ignoring
    SIGINT, not SIGTERM: a TERM to the job's whole process group (``systemctl stop``, a
    harness's ``killpg``) ends it at once, and every later py4j call fails this way."""
    from py4j.protocol import Py4JError, Py4JNetworkError

    if isinstance(err, (Py4JNetworkError, ConnectionError)):
        return True
    # A call the JVM was in as it ended fails as a Java error (with no message to read); the
    # JVM may still be running its shutdown hooks then.
    return isinstance(err, Py4JError) and _jvm_ends_within(_JVM_END_WAIT_S)


_JVM_END_WAIT_S = 5.0


def _jvm_ends_within(timeout_s: float) -> bool:
    """Whether the driver's JVM (PySpark's child, or, started by ``spark-submit``, the parent
    this process would outlive) has ended or ends within ``timeout_s``."""
    from pyspark import SparkContext

    process = getattr(SparkContext._gateway, "proc", None)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ended = process.poll() is not None if process is not None else os.getppid() == 1
        if ended:
            return True
        time.sleep(0.05)
    return False


def _delta_jars(jars_dir: Path | None) -> list[Path]:
    """The Delta jars to add: those of ``jars_dir`` (default: the checkout's jars/), or none
    when the package runs without a checkout (a wheel shipped with ``--py-files``) and Spark
    already has Delta in its own jars folder (``make setup`` links them there)."""
    try:
        return find_delta_jars(jars_dir)
    except EnvironmentCheckError:
        if jars_dir is None and any((spark_home() / "jars").glob("delta-spark_*")):
            return []
        raise


def _forkless_fs_jar() -> Path | None:
    """The forkless local file system's jar: pyspark's (linked there by ``make setup``) or
    the checkout's build; ``None`` (Hadoop's own file system) when neither has it."""
    import pyspark

    for candidate in (
        Path(pyspark.__file__).parent / "jars" / FORKLESS_FS_JAR,
        repo_root() / "build" / FORKLESS_FS_JAR,
    ):
        if candidate.is_file():
            return candidate
    _log.debug("no %s: Spark keeps Hadoop's local file system", FORKLESS_FS_JAR)
    return None


def _jars_in_pyspark(jars: list[Path]) -> bool:
    import pyspark

    pyspark_jars = Path(pyspark.__file__).parent / "jars"
    return all((pyspark_jars / jar.name).exists() for jar in jars)
