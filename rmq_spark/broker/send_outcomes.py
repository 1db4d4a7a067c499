"""What a stored send means to its producer: the store's answer as a ``SendOutcome``.

Owns the mapping of a ``PutResult`` or a ``StoreError`` to the outcome a producer gets (as
RocketMQ's SendMessageProcessor and proxy map them), where a slave must have a record for it
to count as replicated (``end``), and one slave wait applied to a batch's outcomes
(``confirmed``). ``service.py`` decides when; every front answers from these outcomes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rmq_spark.broker.send_model import SendCode, SendOutcome, reject
from rmq_spark.errors import StoreClosedError, StoreError
from rmq_spark.store.put import PutResult, PutStatus

__all__ = ["confirmed", "end", "put_outcome", "stopping", "store_failure", "stored_at"]

# How a store refusal reaches the producer (RocketMQ's SendMessageProcessor + proxy mapping).
_PUT_CODES = {
    PutStatus.FLUSH_DISK_TIMEOUT: SendCode.FLUSH_TIMEOUT,
    PutStatus.MESSAGE_ILLEGAL: SendCode.BAD_REQUEST,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: SendCode.MESSAGE_PROPERTIES_TOO_LARGE,
    PutStatus.SERVICE_NOT_AVAILABLE: SendCode.SHUTTING_DOWN,
    PutStatus.CREATE_MAPPED_FILE_FAILED: SendCode.STORE_ERROR,
    PutStatus.UNKNOWN_ERROR: SendCode.STORE_ERROR,
}


def stopping(message_id: str) -> SendOutcome:
    return reject(SendCode.SHUTTING_DOWN, "broker is shutting down", message_id)


def store_failure(err: StoreError, message_id: str) -> SendOutcome:
    if isinstance(err, StoreClosedError):
        return reject(SendCode.SHUTTING_DOWN, "the store is closed", message_id)
    return reject(SendCode.STORE_ERROR, f"store error: {err}", message_id)


def end(result: PutResult) -> int:
    """The offset just past ``result``'s record: what a slave must hold to cover it."""
    return result.physical_offset + result.total_size


def confirmed(outcomes: list[SendOutcome], probe: SendOutcome) -> list[SendOutcome]:
    """``outcomes`` after one slave wait for all of them: ``probe`` refused, so is every OK."""
    if probe.ok:
        return outcomes
    return [
        dataclasses.replace(o, code=probe.code, reason=probe.reason) if o.ok else o
        for o in outcomes
    ]


def stored_at(position: Any, message_id: str, *, duplicate: bool) -> SendOutcome:
    """``OK`` at ``position`` (a ``PutResult``, or a record's earlier copy: its topic, queue
    id, queue offset and physical offset)."""
    return SendOutcome(
        SendCode.OK,
        message_id=message_id,
        topic=position.topic,
        queue_id=position.queue_id,
        queue_offset=position.queue_offset,
        physical_offset=position.physical_offset,
        duplicate=duplicate,
    )


def put_outcome(result: PutResult, message_id: str) -> SendOutcome:
    """``OK`` with the stored position for ``PUT_OK``, else the matching refusal."""
    if result.status is PutStatus.PUT_OK:
        return stored_at(result, message_id, duplicate=result.duplicate)
    code = _PUT_CODES.get(result.status, SendCode.STORE_ERROR)
    return reject(code, f"{result.status.name}: {result.detail}", message_id)
