"""A process of ours with gRPC busy in a thread can still fork and exec.

PySpark starts the driver's JVM with a fork and a ``preexec_fn``, so the fork runs gRPC's
fork handlers; with a gRPC client or server busy in another thread of the process, grpcio's
handlers (on by default) abort the child now and then (SIGABRT after "epoll_wait error: Bad
file descriptor"), and Spark fails to start with ``JAVA_GATEWAY_EXITED`` and nothing on
stderr: a CI run lost its worker's Spark session that way after a test had run the official
client in it. ``import rmq_spark`` turns those handlers off before gRPC is imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_FORKS = 200

_SCRIPT = textwrap.dedent(
    """
    import asyncio, signal, subprocess, sys, threading, time

    import rmq_spark  # noqa: F401  (what is tested: it comes first, as in our processes)
    import grpc

    def busy():
        async def calls():
            server = grpc.aio.server()
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            call = grpc.aio.insecure_channel(f"127.0.0.1:{port}").unary_unary("/x.Y/Z")
            while True:
                try:
                    await call(b"", timeout=0.05)
                except grpc.aio.AioRpcError:
                    pass
        asyncio.run(calls())

    threading.Thread(target=busy, daemon=True).start()
    time.sleep(1)
    failed = 0
    for _ in range(int(sys.argv[1])):
        child = subprocess.Popen(  # a preexec_fn makes it a fork, as PySpark's JVM launch is
            ["true"], stdin=subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
        failed += child.wait() != 0
    print(failed)
    """
)


def test_forks_beside_a_busy_grpc_thread_all_exec() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(_FORKS)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    failed = int(done.stdout.strip().splitlines()[-1])
    assert failed == 0, f"{failed} of {_FORKS} forks died before exec: {done.stderr[-1500:]}"
