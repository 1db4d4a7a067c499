"""SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE: a 4.x producer's send, through the one
send path (``BrokerService``)."""

from __future__ import annotations

from rmq_spark.broker.remoting.calls import Deps, Handler

__all__ = ["handlers"]


def handlers(deps: Deps) -> dict[int, Handler]:
    """The produce codes' handlers over ``deps.service``."""
    return {}
