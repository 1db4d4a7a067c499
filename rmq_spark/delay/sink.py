"""Where restored messages go: the store in this process, or a broker over gRPC.

Owns ``StoreSink`` (embedded: ``PutRequest`` with the properties string verbatim, the record
byte-for-byte what RocketMQ's messageTimeup builds, spec 9.3) and ``GrpcSink`` (a remote
broker through ``broker.producer.Producer``; the broker rebuilds system properties and picks
the queue, so only topic, body, tag, keys, user properties and UNIQ_KEY survive). Each put
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

from rmq_spark.clock import Clock, SystemClock
from rmq_spark.delay.log_reader import LogReader
from rmq_spark.errors import BrokerError, RmqError
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.properties import KEYS, TAGS, UNIQ_KEY, parse_properties

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

    def log_end_offset(self) -> int:
        """A CommitLog offset at or below where the next put will land."""
        ...

    def put(self, records: Sequence[MessageRecord], message_ids: Sequence[str]) -> list[SinkResult]:
        """Put ``records`` in order; may stop early after an ``UNKNOWN`` (fewer results)."""
        ...

    def close(self) -> None: ...


def fallback_message_id(schedule_physical_offset: int) -> str:
    """A stable message id for a record without UNIQ_KEY: the same on every retry."""
    return f"SCHED{schedule_physical_offset:016X}"


class StoreSink:
    """Puts into a ``MessageStore`` open in this process (``Broker.store`` or the store).

    Puts are not ``idempotent``: the store's (topic, UNIQ_KEY) window would drop a legitimate
    second redelivery of one message (a consumer retry carries the same UNIQ_KEY every time).
    The job's intent journal makes redelivery exactly once instead (docs/DELAY.md).
    """

    name = "embedded"
    exact = True

    def __init__(self, store: Any) -> None:
        self._store = getattr(store, "store", store)  # an embedded Broker, or the store itself

    def log_end_offset(self) -> int:
        value = self._store.max_offset
        return int(value() if callable(value) else value)

    def put(self, records: Sequence[MessageRecord], message_ids: Sequence[str]) -> list[SinkResult]:
        from rmq_spark.store.put import PutRequest, PutStatus

        requests = [
            PutRequest(
                topic=r.topic,
                body=r.body,
                queue_id=r.queue_id,
                flag=r.flag,
                sys_flag=r.sys_flag,
                born_timestamp_ms=r.born_timestamp_ms,
                born_host=r.born_host,
                reconsume_times=r.reconsume_times,
                prepared_transaction_offset=0,
                raw_properties=r.properties,
                idempotent=False,
            )
            for r in records
        ]
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
    """Puts through a broker's gRPC endpoint (``rmq-spark broker``) with our Producer.

    The message id sent is the original UNIQ_KEY, so the broker's own idempotence (same topic
    and message id stored once) also guards a retried send.

    Parameters
    ----------
    address
        ``host:port`` of the broker.
    store_dir
        The broker's store, read (never written) to find where the next put can land.
    """

    name = "grpc"
    exact = False

    def __init__(
        self,
        address: str,
        store_dir: str | Path,
        *,
        clock: Clock | None = None,
        request_timeout_s: float = 5.0,
        max_attempts: int = 3,
    ) -> None:
        from rmq_spark.broker.producer import Producer

        self._clock = clock or SystemClock()
        self._producer = Producer(
            address, request_timeout_s=request_timeout_s, max_attempts=max_attempts, clock=clock
        )
        from rmq_spark.spark.segments import read_confirm_offset

        self._reader = LogReader(store_dir)
        # The checkpoint's confirmed offset is a record boundary at or below the log's end:
        # the first scan for the end starts there, not at the oldest segment.
        self._end = read_confirm_offset(Path(store_dir))

    def log_end_offset(self) -> int:
        self._end = self._reader.end_offset(max(self._end, self._reader.min_offset()))
        return self._end

    def put(self, records: Sequence[MessageRecord], message_ids: Sequence[str]) -> list[SinkResult]:
        from rmq_spark.broker.producer import SendRejectedError
        from rmq_spark.broker.proto import definition_pb2 as pb
        from rmq_spark.broker.service import RESERVED_PROPERTY_KEYS

        retryable = {
            pb.INTERNAL_ERROR,
            pb.INTERNAL_SERVER_ERROR,
            pb.MASTER_PERSISTENCE_TIMEOUT,
            pb.PROXY_TIMEOUT,
            pb.TOO_MANY_REQUESTS,
        }
        out: list[SinkResult] = []
        for record, message_id in zip(records, message_ids, strict=True):
            properties = parse_properties(record.properties)
            user = {k: v for k, v in properties.items() if k not in RESERVED_PROPERTY_KEYS}
            keys = tuple(k for k in properties.get(KEYS, "").split(" ") if k)
            try:
                self._producer.send(
                    record.topic,
                    record.body,
                    tag=properties.get(TAGS) or None,
                    keys=keys,
                    properties=user,
                    message_id=properties.get(UNIQ_KEY) or message_id,
                )
            except SendRejectedError as err:
                if err.code in retryable:
                    out.append(SinkResult(PutOutcome.UNKNOWN, reason=str(err)))
                    break
                out.append(SinkResult(PutOutcome.REFUSED, reason=str(err)))
                continue
            except BrokerError as err:
                out.append(SinkResult(PutOutcome.UNKNOWN, reason=f"broker unreachable: {err}"))
                break
            out.append(SinkResult(PutOutcome.OK, self._clock.now_ms()))
        return out

    def close(self) -> None:
        self._producer.close()
        self._reader.close()
