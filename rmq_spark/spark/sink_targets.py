"""Where the ``rocketmq`` sink's rows go: a store opened in the task, or a broker over gRPC.

Owns opening the destination inside a Spark task and sending ``SinkMessage`` batches with
their UNIQ_KEYs as message ids, so that every put is idempotent: ``EmbeddedTarget`` opens the
store with the embedded ``Broker`` (the broker's checks, queue choice and timer transform;
``BrokerService.send_batch``: one ``put_batch`` per batch) and waits its turn for the store's
lock; ``GrpcTarget`` sends ``SendMessageRequest``s to one broker, a few in flight, retrying
a request with the same ids. Refusals become ``SinkRowError`` naming the row.
Does not own the rows (``sink_rows.py``) nor the options (``sink_options.py``).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmq_spark.broker.service import MessageKind, SendCommand
from rmq_spark.clock import SystemClock
from rmq_spark.config import RmqConfig, default_config_path, load_config
from rmq_spark.errors import BrokerError, SinkError, SinkRowError, StoreLockedError
from rmq_spark.spark.sink_options import SinkOptions
from rmq_spark.spark.sink_rows import SinkMessage
from rmq_spark.store.crc import crc32
from rmq_spark.store.delay_levels import parse_message_delay_level
from rmq_spark.store.lockfile import LOCK_FILE

__all__ = ["EmbeddedTarget", "GrpcTarget", "SentCounts", "open_target", "sink_config"]

_LOCK_POLL_S = 0.05
_PROC_LOCKS = Path("/proc/locks")


@dataclass(frozen=True, slots=True)
class SentCounts:
    """What one batch of sends did: rows stored now, rows found already stored."""

    stored: int = 0
    duplicates: int = 0

    def __add__(self, other: SentCounts) -> SentCounts:
        return SentCounts(self.stored + other.stored, self.duplicates + other.duplicates)


def sink_config(options: SinkOptions) -> RmqConfig:
    """The embedded sink's configuration: option ``config`` (default ``conf/rmq.toml`` of a
    checkout, as the CLI) with the ``store.*`` / ``broker.*`` options over it."""
    return load_config(options.config or default_config_path(), dict(options.overrides))


def open_target(options: SinkOptions) -> EmbeddedTarget | GrpcTarget:
    return GrpcTarget(options) if options.brokers else EmbeddedTarget(options)


def _kind(message: SinkMessage) -> MessageKind:
    if message.message_group is not None:
        return MessageKind.FIFO
    if message.delivery_ms is not None:
        return MessageKind.DELAY
    return MessageKind.NORMAL


# --- embedded -----------------------------------------------------------------------------


def lock_holder(store_dir: Path, proc_locks: Path = _PROC_LOCKS) -> int | None:
    """The pid holding ``<store_dir>/lock`` per ``/proc/locks``, if it can be told."""
    try:
        stat = os.stat(store_dir / LOCK_FILE)
        table = proc_locks.read_text()
    except OSError:
        return None
    wanted = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[5] == wanted and fields[4].isdigit():
            return int(fields[4])
    return None


def is_broker_process(pid: int) -> bool:
    """Whether ``pid`` runs a gRPC broker (``rmq-spark broker`` or ``rmq_spark.broker.server``)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    words = [Path(word.decode(errors="replace")).name for word in argv]
    return "rmq_spark.broker.server" in words or ("rmq-spark" in words and "broker" in words)


class EmbeddedTarget:
    """The store at ``options.path``, opened by this task with the embedded broker."""

    def __init__(self, options: SinkOptions) -> None:
        from rmq_spark.broker.embedded import Broker

        config = sink_config(options)
        self.max_delay_level = len(parse_message_delay_level(config.store.message_delay_level))
        store_dir = Path(options.path)
        deadline = time.monotonic() + options.lock_timeout_ms / 1000
        while True:
            try:
                self.broker = Broker(
                    store_dir, broker_config=config.broker, store_config=config.store
                )
                break
            except BrokerError as err:
                if not isinstance(err.__cause__, StoreLockedError):
                    raise
                holder = lock_holder(store_dir)
                if holder is not None and is_broker_process(holder):
                    raise SinkError(
                        f"store {store_dir} is held by a running broker (pid {holder}); "
                        "write through it with option brokers=<its host:port> instead of "
                        "the store path"
                    ) from err
                if time.monotonic() > deadline:
                    raise SinkError(
                        f"store {store_dir}: its lock is still held by "
                        f"{'pid ' + str(holder) if holder else 'another process'} after "
                        f"lockTimeoutMs={options.lock_timeout_ms}; tasks of one job take "
                        "turns, so raise lockTimeoutMs, or write through a broker (brokers)"
                    ) from err
                time.sleep(_LOCK_POLL_S)
        self._clock = SystemClock()

    def send(self, messages: list[SinkMessage], partition: int) -> SentCounts:
        now = self._clock.now_ms()
        commands = [
            SendCommand(
                topic=m.topic,
                body=m.body,
                message_id=m.uniq_key,
                kind=_kind(m),
                tag=m.tag,
                keys=m.keys,
                user_properties=m.properties,
                message_group=m.message_group,
                delivery_timestamp_ms=m.delivery_ms,
                born_timestamp_ms=now,
                delay_level=m.delay_level,
            )
            for m in messages
        ]
        outcomes = self.broker.service.send_batch(commands)
        duplicates = 0
        for message, outcome in zip(messages, outcomes, strict=True):
            if not outcome.ok:
                reason = f"{outcome.code.name}: {outcome.reason}"
                raise SinkRowError(partition, message.row, message.uniq_key, reason)
            duplicates += outcome.duplicate
        return SentCounts(len(messages) - duplicates, duplicates)

    def close(self) -> None:
        self.broker.close()


# --- through a broker -----------------------------------------------------------------------


class GrpcTarget:
    """One broker's gRPC endpoint; requests go out on ``max_inflight_requests`` lanes, each
    lane one request at a time, and a message group always on the same lane (FIFO order)."""

    max_delay_level = 0  # delay levels are refused at plan time through a broker

    def __init__(self, options: SinkOptions) -> None:
        from rmq_spark.broker.grpc.grpc_client import client_metadata, messaging_channel
        from rmq_spark.broker.message_id import MessageIdGenerator
        from rmq_spark.broker.security.auth import RequestSigner

        self._options = options
        self._channel, self._stub = messaging_channel(options.brokers)
        self._metadata = client_metadata(
            f"rmq-spark-sink@{MessageIdGenerator().next_id()}", options.namespace
        )
        self._sign = RequestSigner(options.credentials, SystemClock())
        self._pool = ThreadPoolExecutor(max_workers=options.max_inflight_requests)
        self._clock = SystemClock()

    def send(self, messages: list[SinkMessage], partition: int) -> SentCounts:
        lanes: list[list[SinkMessage]] = [[] for _ in range(self._options.max_inflight_requests)]
        for index, message in enumerate(messages):
            group = message.message_group
            lane = index if group is None else crc32(group.encode("utf-8"))
            lanes[lane % len(lanes)].append(message)
        futures = [self._pool.submit(self._send_lane, lane, partition) for lane in lanes if lane]
        total = SentCounts()
        for future in futures:
            total += future.result()
        return total

    def _send_lane(self, messages: list[SinkMessage], partition: int) -> SentCounts:
        from rmq_spark.broker.proto import service_pb2 as spb

        step = max(1, self._options.batch_messages // self._options.max_inflight_requests)
        total = SentCounts()
        for start in range(0, len(messages), step):
            chunk = messages[start : start + step]
            request = spb.SendMessageRequest(messages=[self._message(m) for m in chunk])
            total += self._send_request(request, chunk, partition)
        return total

    def _message(self, m: SinkMessage) -> Any:
        from rmq_spark.broker.proto import definition_pb2 as pb

        message = pb.Message(body=m.body)
        message.topic.name = m.topic
        message.topic.resource_namespace = self._options.namespace
        message.user_properties.update(m.properties)
        props = message.system_properties
        props.message_id = m.uniq_key
        props.body_encoding = pb.IDENTITY
        props.message_type = pb.NORMAL
        props.born_timestamp.FromMilliseconds(self._clock.now_ms())
        if m.tag is not None:
            props.tag = m.tag
        props.keys.extend(m.keys)
        if m.message_group is not None:
            props.message_group = m.message_group
            props.message_type = pb.FIFO
        if m.delivery_ms is not None:
            props.delivery_timestamp.FromMilliseconds(m.delivery_ms)
            props.message_type = pb.DELAY
        return message

    def _send_request(self, request: Any, chunk: list[SinkMessage], partition: int) -> SentCounts:
        import grpc

        from rmq_spark.broker.grpc.grpc_client import failure_code
        from rmq_spark.broker.proto import definition_pb2 as pb

        retried_codes = {pb.INTERNAL_ERROR, pb.INTERNAL_SERVER_ERROR,
                         pb.MASTER_PERSISTENCE_TIMEOUT, pb.PROXY_TIMEOUT}  # fmt: skip
        problem = ""
        timeout_s = self._options.request_timeout_ms / 1000
        for _attempt in range(self._options.max_attempts):
            started_s = time.monotonic()
            try:
                response = self._stub.SendMessage(
                    request, timeout=timeout_s, metadata=self._sign(self._metadata)
                )
            except grpc.RpcError as err:
                code = failure_code(err, timeout_s, time.monotonic() - started_s)
                problem = f"gRPC {code.name if code else 'error'}: {err}"
                if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    continue  # the same ids again: what was stored is stored once
                raise SinkError(f"broker {self._options.brokers}: {problem}") from err
            entries = list(response.entries)
            if len(entries) != len(chunk):
                problem = f"{pb.Code.Name(response.status.code)}: {response.status.message}"
                if response.status.code in retried_codes:
                    continue
                raise SinkError(f"broker {self._options.brokers} refused a request: {problem}")
            if any(entry.status.code in retried_codes for entry in entries):
                problem = "a retryable status for some of the batch"
                continue
            for message, entry in zip(chunk, entries, strict=True):
                if entry.status.code != pb.OK:
                    name = pb.Code.Name(entry.status.code)
                    reason = f"the broker refused it: {name}: {entry.status.message}"
                    raise SinkRowError(partition, message.row, message.uniq_key, reason)
            return SentCounts(len(chunk), 0)
        raise SinkError(
            f"broker {self._options.brokers}: a request of {len(chunk)} rows failed after "
            f"{self._options.max_attempts} attempts: {problem}"
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._channel.close()
