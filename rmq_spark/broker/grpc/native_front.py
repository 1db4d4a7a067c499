"""``broker.grpc_front = "native"``: the gRPC wire layer in a process of its own.

The front (``native/front``, Go's grpc server) owns HTTP/2, TLS and plaintext on one port,
the connection caps, keepalive and the largest request; it relays every call, bytes in and
bytes out, over a socket pair to this process, where ``native_calls.RelayCalls`` runs the
same handlers grpc.aio runs (validation, the auth gate, the store). The broker binds the
public port itself and hands the front the listening socket, so a port error is the
broker's typed error and a front that dies is started again on the same socket (clients
reconnect, as after any broken connection).

``NativeServer`` stands where ``grpc.aio.server()`` stands in ``server.GrpcEndpoint``.
``build()`` builds the front from ``native/front`` (``make setup`` runs it; Go's module
proxy serves its dependencies); the broker refuses to start with this setting when the
binary is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.grpc.edge import Wave
from rmq_spark.broker.grpc.native_calls import RelayCalls
from rmq_spark.broker.security.tls import TlsFiles
from rmq_spark.errors import BrokerError

__all__ = ["NativeServer", "build", "built", "front_binary", "go_command"]

log = logging.getLogger("rmq_spark.broker")

_REPO = Path(__file__).resolve().parents[3]
_SOURCE = _REPO / "native" / "front"
_BINARY = _REPO / "build" / "native-front" / "rmq-front"
_BINARY_ENV = "RMQ_SPARK_NATIVE_FRONT"
_GO_ELSEWHERE = (Path("/usr/local/go/bin/go"), Path.home() / "go" / "bin" / "go")
_RESTARTS_MAX = 5  # quick deaths in a row before the broker stops starting it again
_QUICK_DEATH_S = 2.0


def front_binary() -> Path:
    """The front's executable (``$RMQ_SPARK_NATIVE_FRONT``, else the repository's build)."""
    return Path(os.environ.get(_BINARY_ENV) or _BINARY)


def built() -> bool:
    """Whether the front's executable is there to run (``grpc_front = "auto"`` runs it then)."""
    return os.access(front_binary(), os.X_OK)


def build(force: bool = False) -> Path:
    """Build the front unless a binary newer than its sources exists; returns its path.

    Raises ``BrokerError`` when Go is missing or the build fails (its output in the message).
    """
    target = _BINARY
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (parallel test workers)
        sources = [path for path in _SOURCE.iterdir() if path.suffix in (".go", ".mod", ".sum")]
        newest = max(path.stat().st_mtime for path in sources)
        if force or not target.exists() or target.stat().st_mtime < newest:
            _go_build(target)
    return target


def go_command(*args: str) -> tuple[list[str], dict[str, str], Path]:
    """The command, environment and directory to run ``go args...`` on the front's sources.

    Raises ``BrokerError`` when Go is missing.
    """
    go = shutil.which("go") or next((str(p) for p in _GO_ELSEWHERE if p.exists()), None)
    if go is None:
        raise BrokerError("building the native front needs Go (https://go.dev/dl/) on PATH")
    return [go, *args], {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}, _SOURCE


def _go_build(target: Path) -> None:
    command, env, source = go_command("build", "-trimpath", "-o", str(target), ".")
    done = subprocess.run(
        command,
        cwd=source, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise BrokerError(f"building the native front failed: {done.stderr.strip()[-2000:]}")


class NativeServer:
    """The front process and its relayed calls, with grpc.aio's server API where the
    endpoint uses it: ``add_generic_rpc_handlers``, ``start``, ``stop``.

    The public socket is bound here (``port``; ``BrokerError`` when it cannot be).
    """

    def __init__(
        self, config: BrokerConfig, host: str, port: int, tls: TlsFiles | None, receive_limit: int
    ) -> None:
        binary = front_binary()
        if not built():
            raise BrokerError(
                f"broker.grpc_front=native: no front at {binary}; build it with `make setup` "
                f"(or set {_BINARY_ENV})"
            )
        if tls is None and config.tls_mode == "enforcing":
            raise BrokerError("broker.tls_mode=enforcing: no certificate given to this endpoint")
        self._args = _front_args(binary, config, tls, receive_limit)
        self._tls_mode = config.tls_mode if tls is not None else "disabled"
        self._listener = _listen(host, port, config.listen)
        self.port: int = self._listener.getsockname()[1]
        self.calls = RelayCalls()
        self._process: subprocess.Popen[bytes] | None = None
        self._stopping = False
        self._watch: asyncio.Task[None] | None = None

    def add_generic_rpc_handlers(self, handlers: Sequence[Any]) -> None:
        self.calls.add_generic_rpc_handlers(handlers)

    def add_wave_handlers(self, waves: Mapping[str, Wave]) -> None:
        self.calls.add_wave_handlers(waves)

    async def start(self) -> None:
        """Start the front; it accepts once this returns (the socket was listening before)."""
        await self._spawn()
        self._watch = asyncio.ensure_future(self._supervise())
        modes = {"disabled": "plaintext only", "enforcing": "TLS only"}
        log.info(
            "broker: port %d serves %s through the native front (pid %d)",
            self.port,
            modes.get(self._tls_mode, "TLS and plaintext"),
            self._process.pid,
        )

    async def _spawn(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds = (theirs.fileno(), self._listener.fileno())
        args = [*self._args, f"-relay-fd={fds[0]}", f"-listen-fd={fds[1]}"]
        try:
            self._process = subprocess.Popen(args, pass_fds=fds, stdin=subprocess.DEVNULL)
        except OSError as err:
            ours.close()
            raise BrokerError(f"cannot start the native front {args[0]}: {err}") from err
        finally:
            theirs.close()
        self.calls = _relaunched(self.calls)
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(lambda: self.calls, sock=ours)
        log.debug("native front: pid %d serves port %d", self._process.pid, self.port)

    async def _supervise(self) -> None:
        """Start the front again when it dies (not when the broker stops it)."""
        quick_deaths = 0
        while True:
            started = time.monotonic()
            await self.calls.lost.wait()
            if self._stopping:
                return
            code = await asyncio.to_thread(self._reap)
            quick_deaths = quick_deaths + 1 if time.monotonic() - started < _QUICK_DEATH_S else 0
            if quick_deaths >= _RESTARTS_MAX:
                log.critical(
                    "broker error: the native front died %d times at start (last exit "
                    "%s); port %d is not served",
                    quick_deaths,
                    code,
                    self.port,
                )
                return
            log.error("broker error: the native front exited (%s); starting it again", code)
            try:
                await self._spawn()
            except BrokerError as err:
                log.critical("broker error: %s; port %d is not served", err, self.port)
                return

    def _reap(self) -> int | None:
        process = self._process
        if process is None:
            return None
        try:
            return process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    async def stop(self, grace_s: float) -> None:
        """Stop accepting, let running calls end for ``grace_s``, stop the front."""
        self._stopping = True
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, grace_s + 2)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait)
        if self._watch is not None:
            self._watch.cancel()
        self._listener.close()


def _relaunched(previous: RelayCalls) -> RelayCalls:
    """A fresh protocol for a new relay, with the handlers the old one had."""
    calls = RelayCalls()
    calls.add_generic_rpc_handlers(previous.handlers)
    calls.add_wave_handlers(previous.waves)
    return calls


def _front_args(
    binary: Path, config: BrokerConfig, tls: TlsFiles | None, receive_limit: int
) -> list[str]:
    args = [
        str(binary),
        f"-tls-mode={config.tls_mode}",
        f"-max-connections={config.max_connections}",
        f"-max-connections-per-address={config.max_connections_per_address}",
        f"-handshake-timeout={config.handshake_timeout_ms}ms",
        f"-keepalive-time={config.keepalive_time_ms}ms",
        f"-keepalive-timeout={config.keepalive_timeout_ms}ms",
        f"-idle-timeout={config.connection_idle_timeout_ms}ms",
        f"-receive-limit={receive_limit}",
        f"-inflight-bytes={config.inflight_request_bytes_max}",
        f"-grace={config.shutdown_grace_ms}ms",
    ]
    if tls is not None:
        args += [f"-cert={tls.cert_file}", f"-key={tls.key_file}"]
    return args


def _listen(host: str, port: int, listen: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError as err:
        sock.close()
        raise BrokerError(f"cannot listen on {listen}: {err.strerror}") from err
    sock.set_inheritable(False)
    return sock


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rmq_spark.broker.grpc.native_front",
        description='Build the broker\'s native gRPC front (broker.grpc_front = "native").',
    )
    parser.add_argument("--force", action="store_true", help="build even if up to date")
    args = parser.parse_args(argv)
    try:
        print(build(force=args.force))
    except BrokerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
