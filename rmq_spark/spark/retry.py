"""Retry and DLQ from Spark: send the rows a ``foreachBatch`` failed back to ``%RETRY%<group>``.

A query with ``consumerGroup=<group>`` reads ``%RETRY%<group>`` beside its topics (as RocketMQ
consumers subscribe to it). ``send_to_retry`` is RocketMQ's send-back for the rows the batch
function could not process: each row names its message by ``physical_offset``; the broker's
copy builder (``broker/consumer/copies.py``) stores a copy bound for ``%RETRY%<group>`` with
delay level ``3 + reconsume_times`` (through SCHEDULE_TOPIC_XXXX; RECONSUME_TIME,
ORIGIN_MESSAGE_ID, RETRY_TOPIC, MAX_RECONSUME_TIMES set), or into ``%DLQ%<group>`` once the
message was reconsumed the group's max times (``subscriptionGroup.json``, default 16).

Exactly once per failed row when a batch is replayed: the copy's UNIQ_KEY is derived from
(group, origin message id, reconsume times) and its put is idempotent, so a second send-back
of the same failure is dropped by the store's idempotency window (the last
``store.idempotency_window_messages`` keys, rebuilt from the log after a restart).

Embedded (``store=`` alone): opens the store in this process (no broker may hold it), first
puts back the retry copies already due (the broker's ``RetryReviver``; the schedule job leaves
``%RETRY%`` records to the broker), then stores the copies. Through a broker (``brokers=`` and
``store=``): one ``StoreService.SendBack`` call per batch of rows (``broker/grpc/store_rpc.py``),
naming each message by its CommitLog offset, which the broker accepts from the store's own
identity only: the call is signed with the secret the broker keeps in ``<store>/config/``, so
the job must run where it can read the store (as it does to read it). The broker's reviver
brings the copies back when due.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmq_spark.errors import GroupOffsetError, SendRejectedError
from rmq_spark.store.config import StoreConfig

__all__ = ["SendBackReport", "failed_offsets", "send_to_retry"]

_BATCH = 64  # send-back requests per SendMessage
_RPC_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class SendBackReport:
    """What one ``send_to_retry`` call stored."""

    retried: int = 0  # copies bound for %RETRY%<group> (through a broker: every send-back)
    dead_lettered: int = 0  # copies stored in %DLQ%<group>
    duplicates: int = 0  # send-backs already stored (a replayed batch)
    revived: int = 0  # embedded: due retry copies put back into %RETRY%<group> first


def failed_offsets(rows: Any) -> list[int]:
    """The physical offsets of ``rows``: a DataFrame with a ``physical_offset`` column (it is
    collected: failed rows are expected to be few), Rows, or integers."""
    if hasattr(rows, "select") and hasattr(rows, "collect"):
        rows = rows.select("physical_offset").collect()
    offsets = []
    for row in rows:
        value = row if isinstance(row, int) else row["physical_offset"]
        offsets.append(int(value))
    return sorted(set(offsets))


def send_to_retry(
    rows: Any,
    group: str,
    *,
    store: str | Path | None = None,
    brokers: str = "",
    store_config: StoreConfig | None = None,
) -> SendBackReport:
    """Send the messages of ``rows`` (see ``failed_offsets``) back for ``group`` to retry.

    Give ``store`` (the store directory) and, when a broker holds it, ``brokers`` (that
    broker's gRPC ``host:port``). ``store_config`` (embedded only) opens the store as
    configured (segment size, delay levels).

    Raises
    ------
    GroupOffsetError
        No ``store``; the broker's secret is missing (it was never started on the store) or the
        broker is unreachable.
    SendRejectedError
        The broker refused a send-back (``send-back refused``, whatever the reason).
    BrokerError
        Embedded, but a broker holds the store (pass ``brokers``).
    """
    if store is None:
        raise GroupOffsetError(
            "send_to_retry needs store= (the store directory; with brokers= its secret signs "
            "the send-back)"
        )
    offsets = failed_offsets(rows)
    if brokers:
        return _through_broker(brokers, Path(store), group, offsets)
    return _embedded(Path(store), group, offsets, store_config)


def _embedded(
    root: Path, group: str, offsets: Iterable[int], store_config: StoreConfig | None
) -> SendBackReport:
    from rmq_spark.broker.consumer import send_back
    from rmq_spark.broker.embedded import Broker
    from rmq_spark.store.put import PutResult

    config = dataclasses.replace(store_config or StoreConfig(), root_dir=root)
    retried = dead = duplicates = 0
    with Broker(root, store_config=config) as broker:
        revived = broker.consume.reviver.revive_due()
        for offset in offsets:
            result = send_back.by_offset(broker.consume, group, offset)
            if not isinstance(result, PutResult):  # the caller holds the store: say why
                raise GroupOffsetError(
                    f"{root}: send-back of {offset} for {group!r} refused: {result.reason}"
                )
            if not result.ok:
                raise GroupOffsetError(
                    f"{root}: send-back of {offset} for {group!r} not stored: {result.status}"
                )
            if result.duplicate:
                duplicates += 1
            elif result.topic.startswith("%DLQ%"):
                dead += 1
            else:
                retried += 1
    return SendBackReport(retried, dead, duplicates, revived)


def _through_broker(address: str, root: Path, group: str, offsets: list[int]) -> SendBackReport:
    import time

    import grpc

    from rmq_spark.broker.grpc.grpc_client import messaging_channel
    from rmq_spark.broker.grpc.store_rpc import send_back_request, store_signed_metadata, store_stub
    from rmq_spark.broker.proto import definition_pb2 as pb

    sent = 0
    channel, _messaging = messaging_channel(address)
    with channel:
        stub = store_stub(channel)
        for first in range(0, len(offsets), _BATCH):
            chunk = offsets[first : first + _BATCH]
            now_ms = int(time.time() * 1000)
            metadata = store_signed_metadata(root, f"rmq-spark-retry@{address}", now_ms)
            if metadata is None:
                raise GroupOffsetError(f"{root}: no broker secret in config/ (start the broker)")
            try:
                reply = stub.SendBack(
                    send_back_request(group, chunk), timeout=_RPC_TIMEOUT_S, metadata=metadata
                )
            except grpc.RpcError as err:
                raise GroupOffsetError(f"{address}: send-back for {group!r} failed: {err}") from err
            entries = list(reply.entries) or [reply] * len(chunk)  # refused as a whole
            for offset, entry in zip(chunk, entries, strict=True):
                if entry.status.code != pb.OK:
                    raise SendRejectedError(
                        entry.status.code,
                        pb.Code.Name(entry.status.code),
                        f"send-back of physical offset {offset} for {group!r}: "
                        f"{entry.status.message}",
                        getattr(entry, "message_id", ""),
                    )
                sent += 1
    return SendBackReport(retried=sent)
