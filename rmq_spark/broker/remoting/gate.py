"""Who may send a remoting request: the authentication and ACL check of each call.

With ``broker.auth_enabled`` off every call passes (as the gRPC port without auth). With it
on, every request is refused ``NO_PERMISSION`` until the 4.x signature check exists.
"""

from __future__ import annotations

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.remoting.calls import Call, response_to
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import ResponseCode

__all__ = ["RemotingGate"]


class RemotingGate:
    """``gate(call)`` -> (refusal or ``None``, principal or ``None``)."""

    def __init__(self, config: BrokerConfig) -> None:
        self._enabled = config.auth_enabled

    def __call__(self, call: Call) -> tuple[RemotingCommand | None, object | None]:
        if not self._enabled:
            return None, None
        return response_to(
            call.command, ResponseCode.NO_PERMISSION, "authentication is not served yet"
        ), None
