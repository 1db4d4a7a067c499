"""Repeated log lines collapsed to one per interval, with a count of the rest.

Owns ``RepeatLimiter``, a ``logging.Filter`` the broker process installs on its handlers
(``install_repeat_limiter``): a record whose logger, level and message template (``msg``
before ``%`` formatting) was already let through less than ``interval_s`` ago is dropped and
counted; the next one let through says how many were dropped ("... [1,023 more like this in
the last 10.0 s]"). At the open-files limit asyncio logged "socket.accept() out of system
resource" with a traceback up to 1,024 times per accept attempt (47 MB of log in 11 s); now
it is one line per interval. Distinct templates are limited independently, so a flood of one
line hides no other; the table of templates is bounded (the oldest forgotten first).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["RepeatLimiter", "install_repeat_limiter"]

_TEMPLATES_MAX = 1024  # templates remembered (a template is code's, not a caller's, text)

_Key = tuple[str, int, str]


class RepeatLimiter(logging.Filter):
    """Lets one record per (logger, level, template) through every ``interval_s``."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[_Key, list[float]] = OrderedDict()  # key -> [passed at, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = self._clock()
        with self._lock:
            entry = self._seen.get(key)
            if entry is not None and now - entry[0] < self.interval_s:
                entry[1] += 1
                return False
            dropped = int(entry[1]) if entry is not None else 0
            self._seen[key] = [now, 0]
            self._seen.move_to_end(key)
            if len(self._seen) > _TEMPLATES_MAX:
                self._seen.popitem(last=False)
        if dropped:
            record.msg = (
                f"{record.getMessage()} [{dropped:,} more like this in the last "
                f"{self.interval_s:.1f} s]"
            )
            record.args = None
        return True


def install_repeat_limiter(interval_s: float, logger: logging.Logger | None = None) -> None:
    """Add a ``RepeatLimiter`` to each handler of ``logger`` (the root logger by default):
    every record reaching a handler passes it, whichever logger it came from."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RepeatLimiter) for f in handler.filters):
            handler.addFilter(RepeatLimiter(interval_s))
