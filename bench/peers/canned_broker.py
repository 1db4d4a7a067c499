"""``rmq-spark broker`` whose sends skip the service and the store: the gRPC ceiling.

Every ``SendMessage`` still goes through grpc.aio, the request's decoding and the handler's
checks in ``grpc_api.py``, but ``BrokerService.send_async`` answers with the outcome of the
first real put (its message id replaced) instead of validating and storing. What such a broker
sustains is what Python's gRPC server allows on this machine whatever the store does; only
``grpc_ceiling.py`` runs it. Usage: ``python canned_broker.py broker --store DIR ...`` (the
``rmq-spark`` command line).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rmq_spark.broker import service  # noqa: E402
from rmq_spark.cli.main import main  # noqa: E402

_real_send_async = service.BrokerService.send_async
_first: list[service.SendOutcome] = []


async def _canned_send_async(self: Any, command: service.SendCommand) -> service.SendOutcome:
    if not _first:
        _first.append(await _real_send_async(self, command))
    return dataclasses.replace(_first[0], message_id=command.message_id)


if __name__ == "__main__":
    service.BrokerService.send_async = _canned_send_async  # type: ignore[method-assign]
    sys.exit(main(sys.argv[1:]))
