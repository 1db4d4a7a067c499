"""The RocketMQ peer for bench/peers: Apache RocketMQ 5.3.3 from Maven Central, on loopback.

``RocketMQBroker`` starts two JVMs from the jars of ``rocketmq-broker.pom.xml`` (fetched once by
``peer_common.fetch_jars`` into ``bench/peers/.cache/rocketmq``, gitignored):

* the name server (``NamesrvStartup``), and
* the proxy in local mode (``ProxyStartup -pm local``): the gRPC endpoint that RocketMQ 5 clients
  talk to, with the broker in the same JVM. The broker flushes with ``SYNC_FLUSH`` (a send is
  answered once its bytes are on disk, as the rmq-spark broker's SYNC flush policy does).

Every port is free and on 127.0.0.1, the heaps are small, and the config, store and logs
(``user.home`` points there) live in one temporary directory. ``store_dir=`` starts the broker
on an existing store instead (a RocketMQ store, or a copy of one rmq-spark wrote: its
``config/*.json`` give the topics, groups and offsets); that directory is the caller's and is
left in place on stop, so its ConsumeQueues can be read afterwards. ``proxy=False`` runs the
broker alone (``BrokerStartup``, what the 4.x remoting clients reach directly: ``remoting.py``);
``namesrv_addr=`` registers it with an existing name server instead of starting one, under
``broker_name`` (``broker-a``) in ``DefaultCluster``. ``start()`` creates the topics
asked for with the admin tool (``MQAdminStartup updateTopic``: 8 queues, message type NORMAL, as
a 5.x producer needs; the proxy does not create topics on first use) and waits until the proxy's
gRPC port answers. ``stop()`` (also on leaving the ``with`` block, however it is left) sends
SIGTERM to both JVMs, proxy first, kills any that has not exited after 30 s, and removes the
temporary directory. Each JVM runs in its own process group, so a Ctrl-C in the terminal reaches
Python, whose ``finally`` stops them, and not the JVMs directly.

Usage as a script (starts the peer, prints its gRPC address, stops it on Ctrl-C or SIGTERM)::

    python bench/peers/rocketmq_peer.py [--seconds 10] [--topic BenchTopic]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from peer_common import (
    JvmProcess,
    PeerError,
    fetch_jars,
    interrupt_on_sigterm,
    java_command,
    port_is_free,
    progress,
    wait_for_port,
)

from rmq_spark.jvm import ROCKETMQ_JAVA_OPENS, ROCKETMQ_VERSION

__all__ = ["ROCKETMQ_VERSION", "RocketMQBroker", "resolve_rocketmq_jars"]

HERE = Path(__file__).resolve().parent
POM = HERE / "rocketmq-broker.pom.xml"
CLUSTER = "DefaultCluster"
QUEUES = 8
ADMIN_TIMEOUT_S = 60.0
OPENS = ROCKETMQ_JAVA_OPENS  # the product's (rmq_spark/jvm.py), one list for both


def resolve_rocketmq_jars() -> list[Path]:
    """RocketMQ's namesrv, proxy (with the broker) and admin tools; fetched on the first call."""
    return fetch_jars("rocketmq", POM)


# Ports for the JVMs come from below Linux's ephemeral range (32768-60999): a port picked
# there is not listened on for the seconds a JVM takes to start, and any process's outgoing
# connection may take it meanwhile (the proxy then fails to bind and exits).
_LOW_PORTS = range(20_000, 32_000)


def _low_ports(taken: set[int], count: int = 1, spread: tuple[int, ...] = (0,)) -> list[int]:
    """``count`` free ports p (each with p + every offset of ``spread`` free too) outside the
    ephemeral range, none of them or their spread in ``taken``; all added to ``taken``."""
    rng = random.Random()
    found: list[int] = []
    for _ in range(400 * count):
        port = rng.randrange(_LOW_PORTS.start + 2, _LOW_PORTS.stop - 2)
        near = {port + offset for offset in spread}
        if near & taken or not all(port_is_free(p) for p in near):
            continue
        taken |= near
        found.append(port)
        if len(found) == count:
            return found
    raise PeerError("rocketmq: found no free ports below the ephemeral range")


def _broker_ports(taken: set[int]) -> int:
    """A free port p for the broker such that p - 2 (its 'fast' remoting server, which RocketMQ
    always puts there) and p + 1 (its HA service) are free too."""
    return _low_ports(taken, 1, (-2, -1, 0, 1))[0]


def _properties(values: dict[str, object]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


class RocketMQBroker:
    """Name server + proxy (broker in-process) on loopback; a context manager that always stops.

    ``topics`` are created before ``start()`` returns; ``flush`` is the broker's flushDiskType.
    ``store_dir``: the store root to run on (default: a fresh one in the work dir, removed on
    stop); ``broker_properties``: extra ``broker.conf`` lines, e.g. ``mappedFileSizeCommitLog``
    to match the store's CommitLog segment size.
    """

    def __init__(
        self,
        *,
        topics: Sequence[str] = (),
        heap: str = "512m",
        namesrv_heap: str = "256m",
        flush: str = "SYNC_FLUSH",
        store_dir: Path | None = None,
        broker_properties: Mapping[str, object] | None = None,
        proxy: bool = True,
        namesrv_addr: str | None = None,
        broker_name: str = "broker-a",
    ) -> None:
        if flush not in ("SYNC_FLUSH", "ASYNC_FLUSH"):
            raise PeerError(f"rocketmq: flush must be SYNC_FLUSH or ASYNC_FLUSH, got {flush!r}")
        self.topics = tuple(topics)
        self.heap = heap
        self.namesrv_heap = namesrv_heap
        self.flush = flush
        if store_dir is not None and not Path(store_dir).is_dir():
            raise PeerError(f"rocketmq: store_dir {store_dir} is not a directory")
        self.store_dir = None if store_dir is None else Path(store_dir).resolve()
        self.broker_properties = dict(broker_properties or {})
        self.proxy = proxy
        self.external_namesrv = namesrv_addr
        self.broker_name = broker_name
        self.grpc_port = 0
        self.broker_port = 0
        self.namesrv_port = 0
        self.workdir: Path | None = None
        self._admin_env: tuple[list[Path], tuple[str, ...], dict[str, str]] = ([], (), {})
        self._namesrv: JvmProcess | None = None
        self._proxy: JvmProcess | None = None

    @property
    def endpoint(self) -> str:
        """The proxy's gRPC address, for ``ClientConfiguration``."""
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def namesrv_addr(self) -> str:
        return self.external_namesrv or f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_pid(self) -> int:
        """The JVM the broker runs in (the proxy's, in proxy mode)."""
        assert self._proxy is not None and self._proxy.process is not None, "not started"
        return self._proxy.process.pid

    @property
    def processes(self) -> list[subprocess.Popen[bytes]]:
        """The JVMs that run now (name server, proxy)."""
        jvms = (self._namesrv, self._proxy)
        return [jvm.process for jvm in jvms if jvm is not None and jvm.process is not None]

    def __enter__(self) -> RocketMQBroker:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 90.0) -> None:
        jars = resolve_rocketmq_jars()
        work = self.workdir = Path(tempfile.mkdtemp(prefix="peers-rocketmq-"))
        # RocketMQ logs (and defaults its store) under user.home: keep all of it in ``work``.
        options = (*OPENS, f"-Duser.home={work}", f"-Drocketmq.home.dir={work}")
        env = {**os.environ, "ROCKETMQ_HOME": str(work), "RMQ_PROXY_HOME": str(work)}
        taken: set[int] = set()
        broker_port = self.broker_port = _broker_ports(taken)
        self.namesrv_port, self.grpc_port, proxy_remoting_port = _low_ports(taken, 3)
        (work / "namesrv.conf").write_text(
            _properties({"listenPort": self.namesrv_port, "bindAddress": "127.0.0.1"})
        )
        (work / "broker.conf").write_text(self._broker_conf(broker_port))
        if not self.proxy:
            self.grpc_port = 0
        (work / "conf").mkdir()
        proxy_conf = work / "conf" / "rmq-proxy.json"
        proxy_conf.write_text(
            json.dumps(
                {
                    "rocketMQClusterName": CLUSTER,
                    "namesrvAddr": self.namesrv_addr,
                    "grpcServerPort": self.grpc_port,
                    "remotingListenPort": proxy_remoting_port,
                    "proxyMode": "local",
                    "grpcShutdownTimeSeconds": 3,
                }
            )
        )
        if self.external_namesrv is None:
            self._start_namesrv(jars, options, env, timeout_s)
        if self.proxy:
            self._start_proxy(jars, options, env, proxy_conf, timeout_s)
        else:
            self._start_broker(jars, options, env, timeout_s)
        self._admin_env = (jars, options, env)
        for topic in self.topics:
            self.create_topic(topic, jars, options, env)

    def _start_namesrv(
        self, jars: list[Path], options: tuple[str, ...], env: dict[str, str], timeout_s: float
    ) -> None:
        work = self.workdir
        assert work is not None
        namesrv_cmd = java_command(self.namesrv_heap, jars, *options)
        self._namesrv = JvmProcess(
            "rocketmq namesrv",
            [
                *namesrv_cmd,
                "org.apache.rocketmq.namesrv.NamesrvStartup",
                "-c",
                str(work / "namesrv.conf"),
            ],  # fmt: skip
            work / "namesrv.out",
            env=env,
            cwd=work,
        )
        wait_for_port(self._namesrv, self.namesrv_port, timeout_s)

    def _start_broker(
        self, jars: list[Path], options: tuple[str, ...], env: dict[str, str], timeout_s: float
    ) -> None:
        """The broker alone (``BrokerStartup``), no proxy: what 4.x clients reach directly."""
        work = self.workdir
        assert work is not None
        self._proxy = JvmProcess(
            "rocketmq broker",
            [*java_command(self.heap, jars, *options), "org.apache.rocketmq.broker.BrokerStartup",
             "-c", str(work / "broker.conf"), "-n", self.namesrv_addr],
            work / "broker.out",
            env=env,
            cwd=work,
        )  # fmt: skip
        wait_for_port(self._proxy, self.broker_port, timeout_s)

    def _start_proxy(
        self,
        jars: list[Path],
        options: tuple[str, ...],
        env: dict[str, str],
        proxy_conf: Path,
        timeout_s: float,
    ) -> None:
        work = self.workdir
        assert work is not None
        proxy_cmd = java_command(self.heap, jars, *options)
        self._proxy = JvmProcess(
            "rocketmq proxy",
            [
                *proxy_cmd,
                "org.apache.rocketmq.proxy.ProxyStartup",
                "-pm",
                "local",
                "-pc",
                str(proxy_conf),
                "-bc",
                str(work / "broker.conf"),
                "-n",
                self.namesrv_addr,
            ],  # fmt: skip
            work / "proxy.out",
            env=env,
            cwd=work,
        )
        wait_for_port(self._proxy, self.grpc_port, timeout_s)

    def admin(self, *args: str) -> str:
        """``mqadmin <args> -n <name server>`` on the running peer: its output (raises
        ``PeerError`` when it exits non-zero)."""
        jars, options, env = self._admin_env
        command = [
            *java_command("128m", jars, *options),
            "org.apache.rocketmq.tools.command.MQAdminStartup", *args, "-n", self.namesrv_addr,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise PeerError(f"rocketmq: mqadmin {args[0]} failed: {done.stdout}{done.stderr}")
        return done.stdout + done.stderr

    def _broker_conf(self, port: int) -> str:
        assert self.workdir is not None
        store = self.store_dir or self.workdir / "store"
        return _properties(
            {
                "brokerClusterName": CLUSTER,
                "brokerName": self.broker_name,
                "brokerId": 0,
                "brokerRole": "ASYNC_MASTER",
                "flushDiskType": self.flush,
                "brokerIP1": "127.0.0.1",
                "listenPort": port,
                "bindAddress": "127.0.0.1",
                "haListenPort": port + 1,
                "namesrvAddr": self.namesrv_addr,
                "storePathRootDir": store,
                "storePathCommitLog": store / "commitlog",
                "autoCreateTopicEnable": "true",
                "deleteWhen": "04",
                "fileReservedTime": 48,
                **self.broker_properties,
            }
        )

    def create_topic(
        self,
        topic: str,
        jars: Sequence[Path],
        options: Sequence[str],
        env: dict[str, str],
    ) -> None:
        """``mqadmin updateTopic`` on the cluster, retried until the broker has registered."""
        command = [
            *java_command("128m", jars, *options),
            "org.apache.rocketmq.tools.command.MQAdminStartup",
            "updateTopic", "-n", self.namesrv_addr, "-c", CLUSTER, "-t", topic,
            "-r", str(QUEUES), "-w", str(QUEUES), "-a", "+message.type=NORMAL",
        ]  # fmt: skip
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while True:
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            output = (done.stdout + done.stderr).strip()
            if done.returncode == 0 and "success" in output.lower():
                return
            if time.monotonic() > deadline:
                tail = output.splitlines()[-1:] or ["no output"]
                raise PeerError(f"rocketmq: updateTopic {topic} failed: {tail[0]}")
            time.sleep(1.0)

    def stop(self) -> None:
        """Stop the proxy, then the name server (SIGTERM, else kill); remove the work dir."""
        proxy, namesrv, self._proxy, self._namesrv = self._proxy, self._namesrv, None, None
        try:
            if proxy is not None:
                proxy.stop()
        finally:
            try:
                if namesrv is not None:
                    namesrv.stop()
            finally:
                if self.workdir is not None:
                    shutil.rmtree(self.workdir, ignore_errors=True)
                    self.workdir = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=f"Fetch Apache RocketMQ {ROCKETMQ_VERSION} if needed, start its name server "
        "and proxy (broker in-process, SYNC_FLUSH) on 127.0.0.1, keep them up for --seconds (or "
        "until Ctrl-C), then stop them."
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to keep it up")
    parser.add_argument("--topic", action="append", default=[], help="a topic to create")
    parser.add_argument("--keep-logs", type=Path, help="copy the work dir's logs here on stop")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, interrupt_on_sigterm)
    try:
        started = time.monotonic()
        with RocketMQBroker(topics=args.topic) as broker:
            progress(
                f"rocketmq {ROCKETMQ_VERSION}: proxy up on {broker.endpoint} (namesrv "
                f"{broker.namesrv_addr}) in {time.monotonic() - started:.1f} s, "
                f"work dir {broker.workdir}"
            )
            try:
                time.sleep(args.seconds)
            finally:
                if args.keep_logs and broker.workdir is not None:
                    shutil.copytree(broker.workdir / "logs", args.keep_logs, dirs_exist_ok=True)
        progress("rocketmq: stopped")
    except PeerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        progress("rocketmq: interrupted; stopped")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
