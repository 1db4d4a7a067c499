"""rmq-spark's own RPCs (``rmq_spark.v1.StoreService``): SendBack and Redeliver.

Each has its own entry point on the broker's gRPC server, behind the same front and auth
interceptor as ``MessagingService`` (who may call is ``store_gate.py``'s), so that SendMessage
stays an ordinary send: a message there that looks like either request is refused or stored
as any other send (the system topics refuse it).

- SendBack (``proto/store_service.proto``): a consumer group's send-back of records it failed,
  each named by a receipt the broker issued or, for the store's identity, by CommitLog offset;
  the rules are ``consumer/send_back.py``'s. Every refusal reads ``SEND_BACK_REFUSED``.
- Redeliver: the schedule job's ``SendMessageRequest`` of redelivery requests
  (``redelivery.ref_to_message``); ``BrokerService`` restores each named schedule record.
  Every refusal reads ``REDELIVERY_REFUSED``.
- CheckTransaction: the txcheck job's due halves (``transactions/check_job.py`` acts on them);
  the gate's refusal reads ``TRANSACTION_CHECK_REFUSED``; the store identity is told when
  the broker checks itself (``broker.transaction_check = "broker"``).

Does not own the rules (``send_back.py``, ``redelivery.py``) nor the registration
(``grpc_api.add_servicer_to_server``).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmq_spark.broker.consumer import send_back
from rmq_spark.broker.grpc.grpc_client import client_metadata
from rmq_spark.broker.grpc.grpc_wire import status, status_code
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import store_service_pb2 as ssb
from rmq_spark.broker.redelivery import ref_from_message
from rmq_spark.broker.security.auth import (
    STORE_ACCESS_KEY,
    read_redelivery_secret,
    signature_metadata,
)
from rmq_spark.broker.security.resources import resolved_of
from rmq_spark.broker.send_model import SendCode, SendOutcome
from rmq_spark.broker.service import BrokerService

if TYPE_CHECKING:
    from rmq_spark.broker.transactions.check_job import CheckJobDesk

__all__ = [
    "STORE_SERVICE",
    "StoreRpcs",
    "send_back_request",
    "send_back_result",
    "store_signed_metadata",
    "store_stub",
]

log = logging.getLogger("rmq_spark.broker")

STORE_SERVICE = ssb.DESCRIPTOR.services_by_name["StoreService"]


def send_back_request(group: str, physical_offsets: list[int]) -> Any:
    """The ``SendBackRequest`` naming records by CommitLog offset (the store identity's)."""
    request = ssb.SendBackRequest(group=pb.Resource(name=group))
    for offset in physical_offsets:
        request.entries.add(physical_offset=offset, message_id=f"send-back-{offset}")
    return request


def send_back_result(result: Any, message_id: str) -> Any:
    """The ``SendResultEntry`` of one send-back: the copy's UNIQ_KEY and queue offset."""
    if isinstance(result, send_back.Refused):
        log.info("broker: send-back %r refused: %s", message_id, result.reason)
        refused = pb.Status(code=pb.FORBIDDEN, message=send_back.SEND_BACK_REFUSED)
        return spb.SendResultEntry(status=refused, message_id=message_id)
    if not result.ok:
        failed = pb.Status(
            code=pb.INTERNAL_SERVER_ERROR, message=f"the copy was not stored: {result.status.name}"
        )
        return spb.SendResultEntry(status=failed, message_id=message_id)
    return spb.SendResultEntry(
        status=status(pb.OK),
        message_id=result.uniq_key or message_id,
        offset=result.queue_offset,
    )


class StoreRpcs:
    """SendBack and Redeliver over one broker: ``BrokerService.send_back`` / ``redeliver``."""

    def __init__(
        self,
        service: BrokerService,
        executor: Executor,
        shutdown: asyncio.Event,
        tx_desk: CheckJobDesk | None = None,
    ) -> None:
        self._service = service
        self._executor = executor
        self._shutdown = shutdown
        self._tx_desk = tx_desk  # None: a slave (its master checks)

    def _stopping(self) -> Any | None:
        if not self._shutdown.is_set():
            return None
        stopping = status(status_code(SendCode.SHUTTING_DOWN), "broker is shutting down")
        return spb.SendMessageResponse(status=stopping)

    async def send_back(self, request: Any, context: Any) -> Any:
        stopping = self._stopping()
        if stopping is not None:
            return stopping
        resolved = resolved_of(context)  # the group and topics store_gate checked
        assert resolved.group is not None
        group, pairs = resolved.group.full, zip(request.entries, resolved.topics, strict=True)
        work = lambda: [self._send_back_one(group, e, t.full) for e, t in pairs]  # noqa: E731
        entries = await asyncio.get_running_loop().run_in_executor(self._executor, work)
        return _response(entries)

    def _send_back_one(self, group: str, entry: Any, topic: str) -> Any:
        record: send_back.SendBackRecord | None = None
        if entry.WhichOneof("record") == "physical_offset":
            # store_gate lets an entry by offset through only for the store identity
            record = send_back.ByOffset(entry.physical_offset)
        elif entry.WhichOneof("record") == "receipt_handle":
            record = send_back.ByReceipt(topic, entry.receipt_handle)
        if record is None:
            result: Any = send_back.Refused("the entry names no record")
        else:
            result = self._service.send_back(group, record)
        return send_back_result(result, entry.message_id)

    async def redeliver(self, request: Any, context: Any) -> Any:
        stopping = self._stopping()
        if stopping is not None:
            return stopping
        loop = asyncio.get_running_loop()
        entries = []
        for message in request.messages:  # store_gate checked each one's schedule topic
            ref, mid = ref_from_message(message), message.system_properties.message_id
            outcome = await loop.run_in_executor(self._executor, self._service.redeliver, ref, mid)
            entries.append(_entry(outcome))
        # the redelivery journal is durable before the reply says OK
        await loop.run_in_executor(self._executor, self._service.sync_redeliveries)
        return _response(entries)

    async def check_transaction(self, request: Any, context: Any) -> Any:
        """The txcheck job's request (only the store identity gets here: ``store_gate.py``)."""
        if self._shutdown.is_set():
            return ssb.CheckTransactionResponse(
                status=status(status_code(SendCode.SHUTTING_DOWN), "broker is shutting down")
            )
        desk = self._tx_desk
        if desk is None or not desk.serving:
            why = (
                "this broker runs the transaction check itself (broker.transaction_check = "
                "broker); set it to job to let rmq-spark txcheck check"
                if desk is not None
                else "a slave does not check transactions: its master does"
            )
            return ssb.CheckTransactionResponse(status=pb.Status(code=pb.FORBIDDEN, message=why))
        named = [(entry.physical_offset, entry.queue_offset) for entry in request.entries]
        outcomes = await desk.act(named)
        response = ssb.CheckTransactionResponse(status=status(pb.OK))
        for (physical_offset, _), outcome in zip(named, outcomes, strict=True):
            response.results.add(
                physical_offset=physical_offset,
                outcome=ssb.CheckOutcome.Value(outcome.outcome),
                asked=outcome.asked,
            )
        return response


def _entry(outcome: SendOutcome) -> Any:
    if outcome.ok:
        return spb.SendResultEntry(
            status=status(pb.OK), message_id=outcome.message_id, offset=outcome.queue_offset
        )
    code = status_code(outcome.code)
    return spb.SendResultEntry(status=status(code, outcome.reason), message_id=outcome.message_id)


def _response(entries: list[Any]) -> Any:
    if not entries:
        return spb.SendMessageResponse(status=pb.Status(code=pb.BAD_REQUEST, message="no entries"))
    codes = {entry.status.code for entry in entries}
    if len(codes) == 1:
        return spb.SendMessageResponse(status=entries[0].status, entries=entries)
    mixed = pb.Status(code=pb.MULTIPLE_RESULTS, message="entries had different results")
    return spb.SendMessageResponse(status=mixed, entries=entries)


def store_stub(channel: Any) -> Any:
    """The ``StoreService`` client stub over ``channel`` (a ``messaging_channel``'s)."""
    from rmq_spark.broker.proto import store_service_pb2_grpc as ssb_grpc

    return ssb_grpc.StoreServiceStub(channel)


def store_signed_metadata(
    store_dir: str | Path, client_id: str, now_ms: int
) -> tuple[tuple[str, str], ...] | None:
    """Headers signed as the store's own identity with the secret the broker keeps in
    ``<store>/config/`` (``auth.read_redelivery_secret``); None before the broker made it."""
    secret = read_redelivery_secret(Path(store_dir))
    if secret is None:
        return None
    return client_metadata(client_id) + signature_metadata(STORE_ACCESS_KEY, secret, now_ms)
