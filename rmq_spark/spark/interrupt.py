"""Ctrl-C and SIGTERM for a job that waits on a streaming query: a flag, not an exception.

PySpark's own SIGINT handler raises ``KeyboardInterrupt`` wherever the main thread is, most
often inside a py4j socket read, and py4j then logs the broken call with several tracebacks
before the job's own handling runs. While a job waits for its query it swaps in a handler that
only sets an event; the wait loop sees it within its poll interval and stops the query
cleanly. Outside the main thread (where Python accepts no signal handlers) nothing changes.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["stop_requested"]


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
