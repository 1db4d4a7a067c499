"""The txcheck job's requests to the broker: ``StoreService.CheckTransaction``.

Owns ``CheckClient``: one request per batch of due halves, signed as the store's identity with
the secret the broker keeps in ``<store>/config/`` (as the schedule job's ``GrpcSink``), and
the answer as one ``Outcome`` per half. A refusal or an unreachable broker is a
``BrokerError``: the job saves no progress past what was answered.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmq_spark.broker.grpc.grpc_client import messaging_channel
from rmq_spark.broker.grpc.store_rpc import store_signed_metadata, store_stub
from rmq_spark.broker.transactions.check_plan import HalfInfo
from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import BrokerError

__all__ = ["CheckClient", "Outcome"]


@dataclass(frozen=True, slots=True)
class Outcome:
    outcome: str  # CHECKED, DISCARDED, NOTHING_TO_DO, NOT_DUE (check_job.py)
    asked: int = 0


class CheckClient:
    """Asks the broker at ``address`` (serving the store at ``store_dir``) to check halves."""

    def __init__(
        self, address: str, store_dir: Path, *, clock: Clock | None = None, timeout_s: float = 60.0
    ) -> None:
        self._address = address
        self._store_dir = store_dir
        self._clock = clock or SystemClock()
        self._timeout_s = timeout_s
        self._channel, _ = messaging_channel(address)
        self._stub = store_stub(self._channel)

    def check(self, halves: list[HalfInfo]) -> list[Outcome]:
        """One outcome per half, in order.

        Raises
        ------
        BrokerError
            The broker is unreachable, has not made its secret yet, or refused the request.
        """
        import grpc

        from rmq_spark.broker.proto import definition_pb2 as pb
        from rmq_spark.broker.proto import store_service_pb2 as ssb

        metadata = store_signed_metadata(
            self._store_dir, f"rmq-spark-txcheck@{self._address}", self._clock.now_ms()
        )
        if metadata is None:
            raise BrokerError(
                f"no broker has served {self._store_dir} yet (no config/redelivery.secret)"
            )
        request = ssb.CheckTransactionRequest()
        for half in halves:
            entry = request.entries.add()
            entry.physical_offset, entry.queue_offset = half.physical_offset, half.queue_offset
        try:
            response: Any = self._stub.CheckTransaction(
                request, timeout=self._timeout_s, metadata=metadata
            )
        except grpc.RpcError as err:
            code = err.code() if hasattr(err, "code") else None
            raise BrokerError(
                f"broker {self._address} unreachable: gRPC {code.name if code else 'error'}"
            ) from None
        if response.status.code != pb.OK or len(response.results) != len(halves):
            status = response.status
            raise BrokerError(
                f"broker {self._address} refused the check: {pb.Code.Name(status.code)}: "
                f"{status.message}"
            )
        return [Outcome(ssb.CheckOutcome.Name(r.outcome), r.asked) for r in response.results]

    def close(self) -> None:
        self._channel.close()
