"""The ``rocketmq`` sink through a cluster: ``option("namesrv", "h:p;h:p")``.

Each task asks the name servers for a topic's route (``GET_ROUTEINFO_BY_TOPIC``, once per
topic per task) and spreads its rows over the queues of every broker with write permission,
straight to each broker's gRPC endpoint (the one an rmq-spark broker announces; a RocketMQ
broker's host and ``DEFAULT_GRPC_PORT``). The queue choice and the retry on a different
broker are the producer's (``broker/cluster/fault.py``: ``QueueChooser``, and
``LatencyFaultTable`` with option ``sendLatencyFaultEnable``); each broker's requests are
``GrpcTarget``'s (lanes, same ids on a retry).

Exactly once: a row's first broker is a function of its partition, its row number and the
route (round-robin from ``partition + row``; a message group by its hash, so a group stays on
one queue), so a retried task or a replayed batch sends each row to the broker that may hold it
already, whose idempotency window drops the repeat. A broker that fails a request (after
``maxAttempts`` attempts) is replaced by another broker of the route for that request, up to
``retryTimesWhenSendFailed`` times: those rows are stored once on the broker that acknowledged
them, and twice when the failed broker had stored them (an answer lost) or when a replay
finds their first broker back (at least once for the rows that failed over, as RocketMQ). With
the fault table on, a broker inside its window is skipped for first choices too, which moves
rows too: exactly once then holds per broker only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from rmq_spark.broker.cluster.broker_table import ask
from rmq_spark.broker.cluster.fault import LatencyFaultTable, QueueChooser, RoutedQueue
from rmq_spark.broker.cluster.route_data import RouteDataError, parse_route
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode
from rmq_spark.clock import SystemClock
from rmq_spark.errors import RemotingFrameError, SinkError, SinkRowError
from rmq_spark.spark.sink_options import SinkOptions
from rmq_spark.spark.sink_rows import SinkMessage
from rmq_spark.spark.sink_targets import GrpcTarget, SentCounts
from rmq_spark.store.crc import crc32

__all__ = ["ClusterTarget", "DEFAULT_GRPC_PORT", "topic_queues"]

log = logging.getLogger(__name__)

DEFAULT_GRPC_PORT = 8081  # RocketMQ proxy's grpcServerPort: brokers that announce none
_CALL_TIMEOUT_S = 5.0
_PERM_WRITE = 2


def _route_body(addr: str, topic: str) -> bytes:
    request = RemotingCommand(
        code=RequestCode.GET_ROUTEINFO_BY_TOPIC, language="PYTHON", ext_fields={"topic": topic}
    )
    response = asyncio.run(ask(addr, request, _CALL_TIMEOUT_S))
    if response.code != 0:
        raise SinkError(f"answered code {response.code}: {response.remark}")
    return response.body


def topic_queues(namesrv: str, topic: str) -> tuple[RoutedQueue, ...]:
    """Every writable queue of ``topic`` (the stored name) on every broker, from the first
    name server that answers, ordered by broker and queue."""
    failures: list[str] = []
    for addr in namesrv.split(";"):
        try:
            routes = parse_route(_route_body(addr, topic), DEFAULT_GRPC_PORT)
        except (OSError, TimeoutError, RemotingFrameError, RouteDataError, SinkError) as err:
            failures.append(f"{addr}: {str(err) or type(err).__name__}")
            continue
        queues = tuple(
            RoutedQueue(route.broker_name, f"{route.grpc_host}:{route.grpc_port}", queue)
            for route in routes
            if route.perm & _PERM_WRITE
            for queue in range(route.queue_count)
        )
        if queues:
            return queues
        failures.append(f"{addr}: no writable broker")
    raise SinkError(f"topic {topic}: no route from option namesrv ({'; '.join(failures)})")


class ClusterTarget:
    """Every broker serving the rows' topics, found through ``options.namesrv``."""

    max_delay_level = 0  # delay levels are refused at plan time through brokers

    def __init__(self, options: SinkOptions) -> None:
        self._options = options
        self._clock = SystemClock()
        self._faults = (
            LatencyFaultTable(self._clock.monotonic_ms)
            if options.send_latency_fault_enable
            else None
        )
        self._routes: dict[str, tuple[RoutedQueue, ...]] = {}
        self._targets: dict[str, GrpcTarget] = {}  # by endpoint

    def _queues(self, topic: str) -> tuple[RoutedQueue, ...]:
        if topic not in self._routes:
            stored = f"{self._options.namespace}%{topic}" if self._options.namespace else topic
            self._routes[topic] = topic_queues(self._options.namesrv, stored)
        return self._routes[topic]

    def _first(self, message: SinkMessage, partition: int) -> RoutedQueue:
        group = message.message_group
        start = partition + message.row if group is None else crc32(group.encode())
        return QueueChooser(self._faults, start=start).choose(self._queues(message.topic), None)

    def send(self, messages: list[SinkMessage], partition: int) -> SentCounts:
        chunks: dict[tuple[str, str], list[SinkMessage]] = {}
        for message in messages:
            broker = self._first(message, partition).broker_name
            chunks.setdefault((message.topic, broker), []).append(message)
        total = SentCounts()
        for (topic, broker), chunk in chunks.items():
            total += self._send_to(topic, broker, chunk, partition)
        return total

    def _send_to(
        self, topic: str, broker: str, chunk: list[SinkMessage], partition: int
    ) -> SentCounts:
        queues, failed = self._queues(topic), []
        while True:
            endpoint = next(q.endpoint for q in queues if q.broker_name == broker)
            started = self._clock.monotonic_ms()
            try:
                counts = self._target(endpoint).send(chunk, partition)
            except SinkRowError:
                raise  # the broker refused a row: another broker would too
            except SinkError as err:
                self._note(broker, started, failed=True)
                failed.append(broker)
                others = tuple(q for q in queues if q.broker_name not in failed)
                if not others or len(failed) > self._options.retry_times_when_send_failed:
                    why = f"topic {topic}: brokers {', '.join(failed)} failed: {err}"
                    raise SinkError(why) from err
                broker = QueueChooser(self._faults, start=partition).choose(others, None)
                broker = broker.broker_name
                log.warning("rocketmq sink: broker %s failed (%s); %d rows of %s go to %s",
                            failed[-1], err, len(chunk), topic, broker)  # fmt: skip
                continue
            self._note(broker, started, failed=False)
            return counts

    def _note(self, broker: str, started_ms: float, *, failed: bool) -> None:
        if self._faults is not None:
            latency = self._clock.monotonic_ms() - started_ms
            self._faults.update(broker, latency, failed=failed)

    def _target(self, endpoint: str) -> GrpcTarget:
        if endpoint not in self._targets:
            one = dataclasses.replace(self._options, brokers=endpoint)
            self._targets[endpoint] = GrpcTarget(one)
        return self._targets[endpoint]

    def close(self) -> None:
        for target in self._targets.values():
            target.close()
        self._targets = {}
