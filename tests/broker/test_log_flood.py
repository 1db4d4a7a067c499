"""Repeated log lines are collapsed: one per ``log_repeat_interval_ms`` with a count.

Before: at the open-files limit asyncio logged "socket.accept() out of system resource" with
a traceback for every queued connection, again every second: 33 MB of log in 8 s here (47 MB
in 11 s in the report). Now the front closes an unanswered connection to accept (one warning
per 10 s), and every repeated line (here: a connection that is not HTTP/2, one INFO line
each) is written once per ``log_repeat_interval_ms`` with a count of the rest.
"""

from __future__ import annotations

import logging
import resource
import socket
import subprocess
import time
from pathlib import Path

import pytest
from broker_harness import REPO_ROOT, broker_command, wait_for

from rmq_spark.broker.security.lograte import RepeatLimiter

_FDS = 200  # the broker's open-files limit (soft and hard): it cannot raise it
_FLOOD = 300  # connections per round: 2 in 3 hold the HTTP/2 preface, 1 in 3 send HTTP/1.1
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_LOG_BOUND_BYTES = 64 * 1024  # stated bound for the whole run (before: ~33 MB)


def _lower_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (_FDS, _FDS))


@pytest.mark.parametrize("front", ["python", "native"])
def test_at_the_open_files_limit_the_log_stays_small(tmp_path: Path, front: str) -> None:
    ready, log_path = tmp_path / "ready", tmp_path / "broker.log"
    args = broker_command(
        tmp_path / "store",
        "127.0.0.1:0",
        "--ready-file",
        str(ready),
        "--set",
        "broker.log_repeat_interval_ms=1000",
        "--set",
        f"broker.grpc_front={front}",
        # the native front's caps would keep it under the limit: let the flood reach it
        "--set",
        "broker.max_connections_per_address=1000",
    )
    # The default front logs each refused connection, repeats counted; the native one logs
    # the open-files limit once per 10 s (grpc's own refusals of what is not HTTP/2 are not
    # logged at its default level).
    awaited = "more like this" if front == "python" else "too many open files"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            preexec_fn=_lower_fd_limit,
        )
    opened: list[socket.socket] = []
    try:
        wait_for(lambda: ready.exists() and ready.read_text().endswith("\n"), 60, "broker")
        host, port = ready.read_text().strip().rsplit(":", 1)
        for _ in range(2):  # two rounds, more than log_repeat_interval_ms apart
            for i in range(_FLOOD):
                try:
                    sock = socket.create_connection((host, int(port)), timeout=2)
                    sock.sendall(_PREFACE if i % 3 else b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                    opened.append(sock)
                except OSError:
                    pass
            time.sleep(1.5)
        wait_for(lambda: awaited in log_path.read_text(errors="replace").lower(), 10, awaited)
        text = log_path.read_text(errors="replace")
    finally:
        for sock in opened:
            sock.close()
        proc.terminate()
        proc.wait(timeout=60)
    size = log_path.stat().st_size
    assert size < _LOG_BOUND_BYTES, f"{size} bytes of log:\n{text[:3000]}"
    if front == "python":
        assert "not an HTTP/2 client preface" in text
    assert "too many open files" in text.lower()  # the limit was reached
    assert "Traceback" not in text


def test_repeat_limiter_counts_what_it_drops() -> None:
    now = [0.0]
    limiter = RepeatLimiter(10.0, clock=lambda: now[0])

    def record(msg: str, *args: object, name: str = "x") -> logging.LogRecord:
        return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, args, None)

    assert limiter.filter(record("refused %d", 1))
    assert not any(limiter.filter(record("refused %d", n)) for n in range(2, 500))
    assert limiter.filter(record("other %d", 1))  # another template is not hidden
    assert limiter.filter(record("refused %d", 1, name="y"))  # nor another logger's
    now[0] = 10.0
    passed = record("refused %d", 500)
    assert limiter.filter(passed)
    assert passed.getMessage() == "refused 500 [498 more like this in the last 10.0 s]"
    assert not limiter.filter(record("refused %d", 501))
