"""``rmq-spark namesrv``: run Apache RocketMQ's own NameServer; ``rmq-spark mqadmin``: its tools.

Owns the two subcommands' arguments and the NameServer's properties file. The JVM launch is
``rmq_spark/jvm.py``; the jars are fetched by ``make setup`` (``scripts/fetch_rocketmq_jars.sh``).
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["register"]

log = logging.getLogger("rmq_spark.namesrv")
DEFAULT_LISTEN = "127.0.0.1:9876"  # RocketMQ's name server port, on loopback
DEFAULT_WORKDIR = "namesrv"
NAMESRV_HEAP = "256m"
MQADMIN_HEAP = "256m"


def register(subparsers: Any) -> None:
    """Add the ``namesrv`` and ``mqadmin`` subcommands to the ``rmq-spark`` parser."""
    parser = subparsers.add_parser(
        "namesrv",
        help="run Apache RocketMQ's NameServer (brokers register, clients find routes)",
        description=(
            "Run Apache RocketMQ 5.3.3's NameServer (org.apache.rocketmq.namesrv.NamesrvStartup "
            "from the jars `make setup` fetched into jars/rocketmq/) in the foreground until "
            "SIGTERM or Ctrl-C, then stop it cleanly (exit 0). It binds only the --listen "
            "address (RocketMQ's bindAddress). Its state and logs (logs/rocketmqlogs/"
            "namesrv.log, namesrv.out) are kept in --workdir. Brokers join it with "
            "`rmq-spark broker --namesrv HOST:PORT`."
        ),
        epilog="example: rmq-spark namesrv --listen 127.0.0.1:9876 --workdir ./namesrv",
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=DEFAULT_LISTEN,
        help=f"address to bind (default {DEFAULT_LISTEN}; 0.0.0.0:9876 for every interface: "
        "the name server has no authentication, anyone who reaches it can (un)register brokers)",
    )
    _add_workdir(parser)
    parser.set_defaults(handler=_run_namesrv)
    admin = subparsers.add_parser(
        "mqadmin",
        help="run Apache RocketMQ's admin tool (mqadmin) from the fetched jars",
        description=(
            "Run org.apache.rocketmq.tools.command.MQAdminStartup with ARGS, e.g. "
            "`rmq-spark mqadmin clusterList -n 127.0.0.1:9876`. Its logs go to --workdir."
        ),
    )
    _add_workdir(admin)
    admin.add_argument("mqadmin_args", nargs=argparse.REMAINDER, metavar="ARGS")
    admin.set_defaults(handler=_run_mqadmin)


def _add_workdir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workdir",
        metavar="DIR",
        type=Path,
        default=Path(DEFAULT_WORKDIR),
        help=f"RocketMQ's home: state and logs (default ./{DEFAULT_WORKDIR})",
    )


def _run_namesrv(args: argparse.Namespace) -> int:
    from rmq_spark.broker.config import parse_listen
    from rmq_spark.broker.server import check_port_free
    from rmq_spark.envcheck import find_rocketmq_jars
    from rmq_spark.errors import ConfigError
    from rmq_spark.jvm import (
        NAMESRV_MAIN,
        ROCKETMQ_VERSION,
        java_command,
        port_accepts,
        rocketmq_env,
        rocketmq_home_options,
        run_in_foreground,
    )

    try:
        host, port = parse_listen(args.listen)
    except ValueError as err:
        raise ConfigError(f"--listen: {err}") from None
    if port == 0:
        raise ConfigError("--listen: the name server needs a fixed port (brokers dial it)")
    jars = find_rocketmq_jars()
    check_port_free(host, port)
    workdir = _workdir(args.workdir)
    properties = workdir / "namesrv.properties"
    properties.write_text(f"listenPort={port}\nbindAddress={host}\n", encoding="utf-8")
    command = [
        *java_command(NAMESRV_HEAP, jars, *rocketmq_home_options(workdir)),
        NAMESRV_MAIN, "-c", str(properties),
    ]  # fmt: skip
    dial = "127.0.0.1" if host in ("0.0.0.0", "::") else host

    def started(pid: int) -> None:
        log.info(
            "namesrv started: Apache RocketMQ %s NameServer listening on %s:%d (pid %d), "
            "logs in %s",
            ROCKETMQ_VERSION, host, port, pid, workdir / "logs" / "rocketmqlogs",
        )  # fmt: skip

    status = run_in_foreground(
        command,
        cwd=workdir,
        env=rocketmq_env(workdir),
        output=workdir / "namesrv.out",
        ready=lambda: port_accepts(dial, port),
        on_ready=started,
    )
    if status == 0:
        log.info("namesrv stopped")
    else:
        log.error("namesrv exited with status %d (see %s)", status, workdir / "namesrv.out")
    return status


def _run_mqadmin(args: argparse.Namespace) -> int:
    from rmq_spark.envcheck import find_rocketmq_jars
    from rmq_spark.jvm import MQADMIN_MAIN, java_command, rocketmq_env, rocketmq_home_options

    workdir = _workdir(args.workdir)
    command = java_command(MQADMIN_HEAP, find_rocketmq_jars(), *rocketmq_home_options(workdir))
    done = subprocess.run(
        [*command, MQADMIN_MAIN, *args.mqadmin_args], env=rocketmq_env(workdir), check=False
    )
    sys.stdout.flush()
    return done.returncode


def _workdir(path: Path) -> Path:
    from rmq_spark.errors import ConfigError

    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--workdir: cannot create {path}: {err.strerror}") from err
    return path.resolve()
