"""The Kafka peer for bench/peers: its jars from Maven Central, and a one-node KRaft broker.

This module owns two things and nothing else:

* ``resolve_jars(kind)``: the jars of one of the two poms kept beside this file, fetched once
  (``peer_common.fetch_jars``) with ``mvn dependency:copy-dependencies`` into
  ``bench/peers/.cache/<kind>/`` (gitignored). A second call finds the manifest and
  downloads nothing. ``broker``: Apache Kafka's server (``kafka_2.13``); ``spark-kafka``:
  Spark's Kafka source for the project's Spark, only the jars the pyspark wheel lacks.
* ``KafkaBroker``: a single-node Kafka in KRaft mode (broker and controller in one JVM) on
  127.0.0.1, free ports, a small heap and its log dirs in a temporary directory. ``start()``
  formats the storage (``kafka.tools.StorageTool``) and waits until the broker accepts
  connections; ``stop()`` (also on leaving the ``with`` block, however it is left) sends
  SIGTERM for Kafka's controlled shutdown, kills the JVM if it has not exited after 30 s, and
  removes the temporary directory. The JVM runs in its own process group, so a Ctrl-C in the
  terminal reaches Python, whose ``finally`` stops the broker, and not the JVM directly.

Usage as a script (starts a broker, prints its address, stops it on Ctrl-C)::

    python bench/peers/kafka_peer.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from peer_common import (
    JvmProcess,
    PeerError,
    fetch_jars,
    free_port,
    interrupt_on_sigterm,
    java_command,
    progress,
    wait_for_port,
)

__all__ = ["KAFKA_VERSION", "KafkaBroker", "PeerError", "interrupt_on_sigterm", "resolve_jars"]

HERE = Path(__file__).resolve().parent
KAFKA_VERSION = "4.1.1"
POMS = {"broker": HERE / "kafka-broker.pom.xml", "spark-kafka": HERE / "spark-kafka.pom.xml"}
# Of spark-sql-kafka's dependencies, only these are missing from the pyspark wheel.
SPARK_KAFKA_ARTIFACTS = (
    "spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2"
)


def resolve_jars(kind: str) -> list[Path]:
    """The jars of ``kind`` (``broker`` or ``spark-kafka``), fetched on the first call only."""
    if kind not in POMS:
        raise PeerError(f"jars: unknown kind {kind!r}; one of {sorted(POMS)}")
    include = SPARK_KAFKA_ARTIFACTS if kind == "spark-kafka" else None
    return fetch_jars(kind, POMS[kind], include)


def _cluster_id() -> str:
    """Kafka's Uuid text form: 16 random bytes, URL-safe base64 without padding. Like Kafka's
    ``Uuid.randomUuid`` it never starts with '-', which a command line would read as an option."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class KafkaBroker:
    """One KRaft node (broker + controller) on loopback; a context manager that always stops it.

    ``partitions`` is the broker's ``num.partitions``: topics created on first use get that many.
    """

    def __init__(self, *, heap: str = "512m", partitions: int = 2) -> None:
        if partitions < 1:
            raise PeerError(f"kafka: partitions must be >= 1, got {partitions}")
        self.heap = heap
        self.partitions = partitions
        self.port = 0
        self.workdir: Path | None = None
        self._jvm: JvmProcess | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The broker's JVM while it runs (None before ``start()`` and after ``stop()``)."""
        return None if self._jvm is None else self._jvm.process

    def __enter__(self) -> KafkaBroker:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 60.0) -> None:
        jvm = java_command(self.heap, resolve_jars("broker"))
        self.workdir = Path(tempfile.mkdtemp(prefix="peers-kafka-"))
        self.port, controller = free_port(), free_port()
        config = self.workdir / "server.properties"
        config.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{controller}",
                    f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
                    f"CONTROLLER://127.0.0.1:{controller}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                    "controller.listener.names=CONTROLLER",
                    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                    "inter.broker.listener.name=PLAINTEXT",
                    f"log.dirs={self.workdir / 'logs'}",
                    f"num.partitions={self.partitions}",
                    "auto.create.topics.enable=true",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=1",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "share.coordinator.state.topic.replication.factor=1",
                    "share.coordinator.state.topic.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "",
                ]
            )
        )
        fmt = subprocess.run(
            [
                *jvm,
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={_cluster_id()}",
                "-c",
                str(config),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if fmt.returncode != 0:
            last = (fmt.stdout + fmt.stderr).strip().splitlines()[-1:] or ["no output"]
            raise PeerError(f"kafka: storage format failed (exit {fmt.returncode}): {last[0]}")
        self._jvm = JvmProcess(
            "kafka", [*jvm, "kafka.Kafka", str(config)], self.workdir / "kafka.log"
        )
        wait_for_port(self._jvm, self.port, timeout_s)

    def stop(self) -> None:
        """Stop the JVM (controlled shutdown, else kill) and remove the work dir. Idempotent."""
        jvm, self._jvm = self._jvm, None
        if jvm is not None:
            jvm.stop()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Fetch the Kafka jars if needed, start a one-node KRaft broker on "
        "127.0.0.1, keep it up for --seconds (or until Ctrl-C), then stop it."
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to keep it up")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, interrupt_on_sigterm)
    try:
        started = time.monotonic()
        with KafkaBroker() as broker:
            progress(
                f"kafka {KAFKA_VERSION}: up on {broker.bootstrap_servers} in "
                f"{time.monotonic() - started:.1f} s (pid group, work dir {broker.workdir})"
            )
            time.sleep(args.seconds)
        progress("kafka: stopped")
    except PeerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        progress("kafka: interrupted; stopped")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
