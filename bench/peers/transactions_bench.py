"""Transactional messages (issue 32): send + commit next to a normal send, and the check-back.

One ``rmq-spark broker`` (SYNC flush, ``rmq_spark_broker.RmqSparkBroker``), raw gRPC calls
(the broker's own protos, one client thread), in one run:

1. ``--sends`` normal sends (SendMessage, one message each), then as many transactions
   (SendMessage TRANSACTION + EndTransaction COMMIT): rate and p50/p99 of each call pair;
2. ``--orphans`` half messages sent (100 per request) and left unresolved; once they are older
   than the transaction timeout the broker's check asks the producer (a Telemetry stream that
   declared the topic), which commits each (EndTransaction SOURCE_SERVER_CHECK, 64 in flight):
   the check-back's throughput is orphans / (last commit answered - first check received);
3. the same with the check run as a job: a second broker with
   ``broker.transaction_check=job`` and ``rmq-spark txcheck --interval 1s`` beside it (the
   job reads the half queue from the store files and has the broker act, 256 halves per
   request), measured the same way (``--no-job`` leaves it out).

Run: ``flock /tmp/bench.lock python bench/peers/transactions_bench.py``.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
from rmq_spark_broker import RmqSparkBroker

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc

TOPIC = "bench-tx"
METADATA = (("x-mq-client-id", "bench-tx-client"),)
TIMEOUT_MS = 10_000


def _message(kind: int, body: bytes) -> Any:
    message = pb.Message(body=body)
    message.topic.name = TOPIC
    message.system_properties.message_id = uuid.uuid4().hex.upper()
    message.system_properties.body_encoding = pb.IDENTITY
    message.system_properties.message_type = kind
    return message


def _end(stub: Any, entry: Any, source: int = pb.SOURCE_CLIENT) -> Any:
    request = spb.EndTransactionRequest(
        message_id=entry.message_id,
        transaction_id=entry.transaction_id,
        resolution=pb.COMMIT,
        source=source,
    )
    request.topic.name = TOPIC
    return request


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.99) - 1]


def latency(stub: Any, count: int, transactional: bool) -> tuple[float, float, float]:
    """(calls per second, p50 ms, p99 ms) of ``count`` sends (+ commits)."""
    samples = []
    body = b"x" * 100
    started = time.perf_counter()
    for _ in range(count):
        begin = time.perf_counter()
        kind = pb.TRANSACTION if transactional else pb.NORMAL
        sent = stub.SendMessage(
            spb.SendMessageRequest(messages=[_message(kind, body)]), metadata=METADATA
        )
        assert sent.status.code == pb.OK, sent.status
        if transactional:
            ended = stub.EndTransaction(_end(stub, sent.entries[0]), metadata=METADATA)
            assert ended.status.code == pb.OK, ended.status
        samples.append((time.perf_counter() - begin) * 1000)
    rate = count / (time.perf_counter() - started)
    p50, p99 = _percentiles(samples)
    return rate, p50, p99


def _settings() -> Iterator[Any]:
    command = spb.TelemetryCommand()
    command.settings.client_type = pb.PRODUCER
    command.settings.publishing.topics.add(name=TOPIC)
    yield command
    threading.Event().wait()  # keep the stream open until the channel closes


def check_back(stub: Any, orphans: int, after_send: Callable[[], None] | None = None) -> float:
    """Check-back throughput (transactions/s) for ``orphans`` unresolved halves."""
    for start in range(0, orphans, 100):
        batch = [_message(pb.TRANSACTION, b"orphan") for _ in range(min(100, orphans - start))]
        sent = stub.SendMessage(spb.SendMessageRequest(messages=batch), metadata=METADATA)
        assert sent.status.code == pb.OK, sent.status
    print(f"  {orphans} halves sent; waiting for the check", flush=True)
    if after_send is not None:
        after_send()
    done: set[str] = set()
    window = threading.Semaphore(64)
    lock = threading.Lock()
    finished = threading.Event()
    first: list[float] = []
    last: list[float] = []

    def answered(future: Any, message_id: str) -> None:
        window.release()
        if future.exception() is None and future.result().status.code == pb.OK:
            with lock:
                done.add(message_id)
                if len(done) >= orphans:
                    last.append(time.perf_counter())
                    finished.set()

    commands: queue.Queue[Any] = queue.Queue()

    def read_stream() -> None:
        try:
            for command in stub.Telemetry(_settings(), metadata=METADATA):
                if command.HasField("recover_orphaned_transaction_command"):
                    commands.put(command.recover_orphaned_transaction_command)
        except grpc.RpcError:
            pass

    threading.Thread(target=read_stream, daemon=True).start()
    while not finished.is_set():
        try:
            recover = commands.get(timeout=1)
        except queue.Empty:
            continue
        if not first:
            first.append(time.perf_counter())
        message_id = recover.message.system_properties.message_id
        entry = spb.SendResultEntry(message_id=message_id, transaction_id=recover.transaction_id)
        window.acquire()
        future = stub.EndTransaction.future(
            _end(stub, entry, pb.SOURCE_SERVER_CHECK), metadata=METADATA
        )
        future.add_done_callback(lambda f, m=message_id: answered(f, m))
    return orphans / (last[0] - first[0])


def job_check_back(settings: tuple[str, ...], orphans: int) -> float:
    """``check_back`` with the check run by ``rmq-spark txcheck`` beside a broker."""
    jobs: list[subprocess.Popen[bytes]] = []
    with RmqSparkBroker(settings=(*settings, "broker.transaction_check=job")) as broker:
        assert broker.workdir is not None
        store, log = broker.workdir / "store", broker.workdir / "txcheck.log"

        def start_job() -> None:
            command = [sys.executable, "-m", "rmq_spark.cli.main", "txcheck", "--store",
                       str(store), "--broker", broker.endpoint, "--interval", "1s"]  # fmt: skip
            for setting in settings:
                command += ["--set", setting]
            with log.open("wb") as out:
                jobs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))

        channel = grpc.insecure_channel(broker.endpoint)
        try:
            return check_back(spb_grpc.MessagingServiceStub(channel), orphans, start_job)
        finally:
            channel.close()
            for job in jobs:
                job.terminate()
                job.wait(60)
            print(Path(log).read_text().strip().splitlines()[-1][:300], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=2000)
    parser.add_argument("--orphans", type=int, default=10_000)
    parser.add_argument("--no-job", action="store_true", help="leave out the txcheck job run")
    args = parser.parse_args()
    settings = (
        "store.flush_policy=SYNC",
        f"broker.transaction_timeout_ms={TIMEOUT_MS}",
        "broker.transaction_check_interval_ms=1000",
        "broker.transaction_check_max=1000",
    )
    with RmqSparkBroker(settings=settings) as broker:
        channel = grpc.insecure_channel(broker.endpoint)
        stub = spb_grpc.MessagingServiceStub(channel)
        latency(stub, 100, transactional=False)  # warm-up: topic creation, connections
        normal = latency(stub, args.sends, transactional=False)
        tx = latency(stub, args.sends, transactional=True)
        rate = check_back(stub, args.orphans)
        channel.close()
    job_rate = None if args.no_job else job_check_back(settings, args.orphans)
    print(f"| workload ({args.sends} each, 100 B, SYNC) | calls/s | p50 ms | p99 ms |")
    print("|---|---|---|---|")
    print(f"| normal send | {normal[0]:,.0f} | {normal[1]:.2f} | {normal[2]:.2f} |")
    print(f"| transactional send + commit | {tx[0]:,.0f} | {tx[1]:.2f} | {tx[2]:.2f} |")
    print(f"check-back: {args.orphans} orphaned halves committed at {rate:,.0f} transactions/s")
    if job_rate is not None:
        print(f"check-back by the txcheck job: {job_rate:,.0f} transactions/s")


if __name__ == "__main__":
    main()
