"""The EndTransaction RPC: an ``EndTransactionRequest`` -> ``TransactionService.end``.

The caller's right is the edge's (``acl.py``: Pub on the request's topic); the producer group
is the topic, as the Java proxy makes it, so a producer ends only transactions of a topic it
may send to: the half must name that topic. Answers as the Java proxy does: a blank id is
INVALID_TRANSACTION_ID, an id that names no half of this topic INTERNAL_SERVER_ERROR
("cannot found transaction data"), anything else found OK (also a duplicate).
"""

from __future__ import annotations

from typing import Any

from rmq_spark.broker.grpc.grpc_wire import status, status_code
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.security.resources import resolved_of
from rmq_spark.broker.send_model import SendCode
from rmq_spark.broker.service import BrokerService
from rmq_spark.broker.transactions.service import EndStatus, Resolution

__all__ = ["end_transaction"]

_RESOLUTIONS = {
    pb.COMMIT: Resolution.COMMIT,
    pb.ROLLBACK: Resolution.ROLLBACK,
}


async def end_transaction(service: BrokerService, request: Any, context: Any) -> Any:
    """The ``EndTransactionResponse`` of ``request``."""
    if not request.transaction_id.strip():
        return spb.EndTransactionResponse(
            status=status(pb.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
        )
    gate = service.replication
    refused = None if gate is None else gate.refusal(request.message_id)
    if refused is not None:
        return spb.EndTransactionResponse(status=status(status_code(refused.code), refused.reason))
    topic = resolved_of(context).topic.full  # the name the ACL checked (resources.py)
    outcome = await service.transactions.end(
        topic=topic,
        group=topic,
        message_id=request.message_id,
        transaction_id=request.transaction_id,
        resolution=_RESOLUTIONS.get(request.resolution, Resolution.UNKNOWN),
    )
    if outcome.status is EndStatus.OK:
        return spb.EndTransactionResponse(status=status(pb.OK))
    if outcome.status is EndStatus.NOT_FOUND:
        code = pb.INTERNAL_SERVER_ERROR
    else:
        code = status_code(SendCode.STORE_ERROR)
    return spb.EndTransactionResponse(status=status(code, outcome.reason))
