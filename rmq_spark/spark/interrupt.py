"""Ctrl-C and SIGTERM for a job that waits on a streaming query: a flag, not an exception.

PySpark's own SIGINT handler raises ``KeyboardInterrupt`` wherever the main thread is, most
often inside a py4j socket read, and py4j then logs the broken call with several tracebacks
before the job's own handling runs. While a job waits for its query it swaps in a handler that
only sets an event; the wait loop sees it within its poll interval and stops the query
cleanly. Outside the main thread (where Python accepts no signal handlers) nothing changes.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["jvm_gone", "stop_requested"]


@contextmanager
def stop_requested(event: threading.Event | None = None) -> Iterator[threading.Event]:
    """An event (``event``, else a new one) set by SIGINT or SIGTERM while the block runs
    (handlers restored after)."""
    event = event or threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield event
        return

    def request_stop(_signum: int, _frame: Any) -> None:
        event.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield event
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
