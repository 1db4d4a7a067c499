"""The broker process's CPU share: a session of its own under Linux's autogroup scheduling."""

from __future__ import annotations

import logging
import os

__all__ = ["take_own_cpu_share"]

log = logging.getLogger("rmq_spark.broker")


def take_own_cpu_share() -> bool:
    """Make this process the leader of a new session, unless it has a terminal; True if it did.

    Linux schedules by autogroup (``/proc/sys/kernel/sched_autogroup_enabled``): every session
    gets an equal share of the CPU, split among all its processes. A broker started from the
    same script or service session as Spark jobs shared one share with every Spark and Python
    worker, and under load answered sends after the clients' deadline (``CANCELLED``). In a
    session of its own it gets a share of its own, as a JVM broker started as a service does.
    With a terminal on stdin it is run by hand: the terminal's session is its own already, and
    Ctrl-C must still reach it. A process that leads its process group cannot start a session
    (``EPERM``); it then stays where it is, which is logged.
    """
    if os.getsid(0) == os.getpid() or os.isatty(0):
        return False
    try:
        os.setsid()
    except OSError as err:
        log.info("broker: stays in its parent's session (%s): it shares that CPU share", err)
        return False
    log.debug("broker: leads session %d (a CPU share of its own)", os.getsid(0))
    return True
