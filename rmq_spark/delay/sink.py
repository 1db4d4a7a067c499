"""Where restored messages go: the store in this process, or a broker over gRPC.

Owns ``StoreSink`` (embedded: ``PutRequest`` with the properties string verbatim, the record
byte-for-byte what RocketMQ's messageTimeup builds, docs/DELAY.md) and ``GrpcSink`` (a remote
broker: redelivery requests that name the schedule record, which the broker restores and
puts itself, so the stored record is the same as in process; ``broker/redelivery.py``). Each put
outcome is one of three: ``OK``, ``REFUSED`` (the broker said no and nothing was stored; retry
later), ``UNKNOWN`` (it may or may not be stored: the job keeps its intent and settles it by
reading the log). Does not own retries, batching or progress (``redeliver.py``).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rmq_spark.broker.grpc.grpc_client import client_metadata, messaging_channel
from rmq_spark.broker.grpc.store_rpc import store_stub
from rmq_spark.broker.redelivery import RedeliveryRef, redelivery_put_request, ref_to_message
from rmq_spark.broker.security.auth import (
    STORE_ACCESS_KEY,
    read_redelivery_secret,
    signature_metadata,
)
from rmq_spark.clock import Clock, SystemClock
from rmq_spark.delay.log_reader import LogReader
from rmq_spark.errors import RmqError
from rmq_spark.store.checkpoint import read_checkpoint
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.put import PutRequest

__all__ = ["GrpcSink", "PutOutcome", "Sink", "SinkResult", "StoreSink", "fallback_message_id"]

log = logging.getLogger("rmq_spark.delay")


class PutOutcome(enum.Enum):
    OK = "OK"  # stored (and acknowledged under the store's flush policy)
    REFUSED = "REFUSED"  # not stored; the broker refused it (bad topic, too large, ...)
    UNKNOWN = "UNKNOWN"  # may be stored: a timeout, a lost connection, an I/O error


@dataclass(frozen=True, slots=True)
class SinkResult:
    """One put's outcome; ``store_timestamp_ms`` when the broker tells it (else ``None``)."""

    outcome: PutOutcome
    store_timestamp_ms: int | None = None
    physical_offset: int = -1
    reason: str = ""


class Sink(Protocol):
    """Puts restored records into their real topics."""

    name: str
    exact: bool  # stored records equal the restored ones (``schedule.fingerprint(exact=...)``)
    by_reference: bool  # puts name the schedule record (``refs``) instead of carrying it

    def log_end_offset(self) -> int:
        """A CommitLog offset at or below where the next put will land."""
        ...

    def put(
        self,
        records: Sequence[MessageRecord],
        message_ids: Sequence[str],
        refs: Sequence[RedeliveryRef] = (),
        requests: Sequence[PutRequest] | None = None,
    ) -> list[SinkResult]:
        """Put ``records`` in order; may stop early after an ``UNKNOWN`` (fewer results).

        ``refs`` (``by_reference`` sinks): the schedule record of each. ``requests``: the
        ``redelivery_put_request`` of each when already built."""
        ...

    def close(self) -> None: ...


def fallback_message_id(schedule_physical_offset: int) -> str:
    """A stable message id for a record without UNIQ_KEY: the same on every retry."""
    return f"SCHED{schedule_physical_offset:016X}"


class StoreSink:
    """Puts into a ``MessageStore`` open in this process (``Broker.store`` or the store).

    Puts are not ``idempotent`` (``broker.redelivery.redelivery_put_request``).
    """

    name = "embedded"
    exact = True
    by_reference = False

    def __init__(self, store: Any) -> None:
        self._store = getattr(store, "store", store)  # an embedded Broker, or the store itself

    def log_end_offset(self) -> int:
        value = self._store.max_offset
        return int(value() if callable(value) else value)

    def put(
        self,
        records: Sequence[MessageRecord],
        message_ids: Sequence[str],
        refs: Sequence[RedeliveryRef] = (),
        requests: Sequence[PutRequest] | None = None,
    ) -> list[SinkResult]:
        from rmq_spark.store.put import PutStatus

        if requests is None:
            requests = [redelivery_put_request(r) for r in records]
        refused = {PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED}
        try:
            results = self._store.put_batch(requests) if len(requests) > 1 else []
            if not results or any(r.status in refused for r in results):
                # put_batch is all-or-nothing for validity (and needs the batch to fit one
                # segment): one bad message must not hold back the others.
                results = []
                for request in requests:
                    results.append(self._store.put(request))
                    if results[-1].status not in refused and not results[-1].ok:
                        break
        except RmqError as err:
            return [SinkResult(PutOutcome.UNKNOWN, reason=f"store error: {err}")]
        out: list[SinkResult] = []
        for result in results:
            if result.status is PutStatus.PUT_OK:
                out.append(
                    SinkResult(PutOutcome.OK, result.store_timestamp_ms, result.physical_offset)
                )
            elif result.status in refused:
                reason = f"{result.status.name}: {result.detail}"
                out.append(SinkResult(PutOutcome.REFUSED, reason=reason))
            else:
                out.append(SinkResult(PutOutcome.UNKNOWN, reason=result.status.name))
                break
        return out

    def close(self) -> None:
        """The store belongs to the caller; nothing to do."""


class GrpcSink:
    """Puts through a broker's gRPC endpoint (``rmq-spark broker``) as redelivery requests.

    Each message of a ``SendMessageRequest`` names its schedule record
    (``broker.redelivery.ref_to_message``); the broker reads and restores it from its own
    store, so the stored record is the one the in-process sink would store (``exact``). One
    attempt per request, no transport retries: a put whose answer is lost is ``UNKNOWN`` and
    the job's intent settles it by reading the log (a blind retry could store it twice).

    Parameters
    ----------
    address
        ``host:port`` of the broker.
    store_dir
        The broker's store, read (never written) to find where the next put can land, and
        where the broker keeps the redelivery secret (``config/redelivery.secret``) that
        signs each request as the store's identity (``broker.security.auth.STORE_ACCESS_KEY``).
    credentials
        ``(access key, secret key)`` of a user with the ``Redeliver`` right to sign with
        instead (auth on); ``None``: the store's secret.
    """

    name = "grpc"
    exact = True
    by_reference = True
    messages_per_request = 200

    def __init__(
        self,
        address: str,
        store_dir: str | Path,
        *,
        clock: Clock | None = None,
        request_timeout_s: float = 10.0,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        self._clock = clock or SystemClock()
        self._timeout_s = request_timeout_s
        self._channel, _messaging = messaging_channel(address)
        self._stub = store_stub(self._channel)  # StoreService.Redeliver
        self._metadata = client_metadata(f"rmq-spark-schedule@{address}")
        self._store_dir = Path(store_dir)
        self._credentials = credentials
        self._reader = LogReader(store_dir)
        # The checkpoint's confirmed offset is a record boundary at or below the log's end:
        # the first scan for the end starts there, not at the oldest segment.
        checkpoint = read_checkpoint(Path(store_dir))
        self._end = max(0, checkpoint.confirm_phy_offset) if checkpoint is not None else 0

    def log_end_offset(self) -> int:
        self._end = self._reader.end_offset(max(self._end, self._reader.min_offset()))
        return self._end

    def put(
        self,
        records: Sequence[MessageRecord],
        message_ids: Sequence[str],
        refs: Sequence[RedeliveryRef] = (),
        requests: Sequence[PutRequest] | None = None,
    ) -> list[SinkResult]:
        import grpc

        from rmq_spark.broker.proto import definition_pb2 as pb
        from rmq_spark.broker.proto import service_pb2 as spb

        assert len(refs) == len(records), "GrpcSink needs the schedule record of every put"
        unknown_codes = {
            pb.INTERNAL_ERROR,
            pb.INTERNAL_SERVER_ERROR,
            pb.MASTER_PERSISTENCE_TIMEOUT,
            pb.PROXY_TIMEOUT,
            pb.TOO_MANY_REQUESTS,
        }
        out: list[SinkResult] = []
        step = self.messages_per_request
        for start in range(0, len(refs), step):
            chunk = refs[start : start + step]
            request = spb.SendMessageRequest(messages=[ref_to_message(ref) for ref in chunk])
            try:
                response = self._stub.Redeliver(
                    request, timeout=self._timeout_s, metadata=self._signed_metadata()
                )
            except grpc.RpcError as err:
                code = err.code() if hasattr(err, "code") else None
                reason = f"broker unreachable: gRPC {code.name if code else 'error'}"
                out.append(SinkResult(PutOutcome.UNKNOWN, reason=reason))
                return out
            now_ms = self._clock.now_ms()
            if len(response.entries) != len(chunk):
                status = response.status
                reason = f"{pb.Code.Name(status.code)}: {status.message}"
                out.append(SinkResult(PutOutcome.UNKNOWN, reason=reason))
                return out
            for entry in response.entries:
                code = entry.status.code
                reason = f"{pb.Code.Name(code)}: {entry.status.message}"
                if code == pb.OK:
                    out.append(SinkResult(PutOutcome.OK, now_ms))
                elif code in unknown_codes:
                    out.append(SinkResult(PutOutcome.UNKNOWN, reason=reason))
                    return out
                else:
                    out.append(SinkResult(PutOutcome.REFUSED, reason=reason))
        return out

    def _signed_metadata(self) -> tuple[tuple[str, str], ...]:
        """The request headers, signed now (the broker refuses a stale signature)."""
        if self._credentials is None:
            secret = read_redelivery_secret(self._store_dir)  # made by the broker's first start
            if secret is None:
                return self._metadata  # unsigned: the broker refuses, the job retries later
            self._credentials = (STORE_ACCESS_KEY, secret)
        access_key, secret_key = self._credentials
        return self._metadata + signature_metadata(access_key, secret_key, self._clock.now_ms())

    def close(self) -> None:
        self._channel.close()
        self._reader.close()
