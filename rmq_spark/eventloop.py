"""Which event loop rmq-spark's own coroutines run on (the broker's gRPC server).

``asyncio`` (the broker's default) is asyncio's own loop; ``uvloop`` forces uvloop (a
dependency on Linux and macOS); ``auto`` picks uvloop where it is installed. uvloop runs
callbacks and task wake-ups in C: with 64 SYNC producers, where every put suspends its
coroutine once, ``bench/bench_put.py`` measures 5-15 % more puts per second on it
(BENCHMARKS.md). It is not the default yet: the broker's load test stalled in about 4 of 16
runs on uvloop before ``ring_commit.py`` got its safety-net timer (14 of 14 passed since,
without the timer ever finding an ended fsync first), and the cause was not found.
``MessageStore.put_async`` works on either; embedded users pick their own loop.
"""

from __future__ import annotations

import asyncio
import importlib

__all__ = ["EVENT_LOOPS", "new_event_loop", "uvloop_available"]

EVENT_LOOPS = ("auto", "asyncio", "uvloop")


def uvloop_available() -> bool:
    """Whether uvloop can be imported here."""
    try:
        importlib.import_module("uvloop")
    except ImportError:
        return False
    return True


def new_event_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    """A new loop of ``kind`` (one of ``EVENT_LOOPS``).

    Raises
    ------
    ValueError
        ``kind`` is not one of ``EVENT_LOOPS``, or is ``uvloop`` where uvloop is not
        installed.
    """
    if kind not in EVENT_LOOPS:
        raise ValueError(f"event loop: must be one of {', '.join(EVENT_LOOPS)}, got {kind!r}")
    if kind == "asyncio" or (kind == "auto" and not uvloop_available()):
        return asyncio.new_event_loop()
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError as err:
        raise ValueError(
            f"event loop: uvloop is not installed ({err}); install it (pip install uvloop) or "
            "set event_loop to auto or asyncio"
        ) from None
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop
