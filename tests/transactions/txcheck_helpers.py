"""Helpers of the txcheck job tests: the job as a subprocess, its raw RPC, what a key's halves
hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
from broker_harness import REPO_ROOT, BrokerProcess, props
from tx_helpers import HALF, records_of

from rmq_spark.broker.proto import store_service_pb2 as ssb
from rmq_spark.broker.proto import store_service_pb2_grpc as ssb_grpc

JOB = "broker.transaction_check=job"


def txcheck_command(broker: BrokerProcess, *args: str, settings: tuple[str, ...] = ()) -> list[str]:
    command = [sys.executable, "-m", "rmq_spark.cli.main", "txcheck"]
    command += ["--store", str(broker.store_dir), "--broker", broker.address, *args]
    for item in settings:
        command += ["--set", item]
    return command


def txcheck_once(broker: BrokerProcess, *settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        txcheck_command(broker, "--once", settings=settings),
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False,
    )  # fmt: skip


def txcheck_process(
    broker: BrokerProcess, log: Path, *args: str, settings: tuple[str, ...] = ()
) -> Any:
    handle = log.open("ab")
    return subprocess.Popen(
        txcheck_command(broker, *args, settings=settings),
        stdout=handle, stderr=subprocess.STDOUT, cwd=REPO_ROOT, start_new_session=True,
    )  # fmt: skip


def check_rpc(address: str, named: list[tuple[int, int]], metadata: Any = ()) -> Any:
    """One raw CheckTransaction call; its response."""
    request = ssb.CheckTransactionRequest()
    for physical_offset, queue_offset in named:
        request.entries.add(physical_offset=physical_offset, queue_offset=queue_offset)
    channel = grpc.insecure_channel(address)
    try:
        stub = ssb_grpc.StoreServiceStub(channel)
        return stub.CheckTransaction(request, metadata=metadata or None, timeout=30)
    finally:
        channel.close()


def check_times_by_body(store_dir: Path) -> dict[bytes, list[int]]:
    """TRANSACTION_CHECK_TIMES of every copy of each half, by body, in store order."""
    found: dict[bytes, list[int]] = {}
    for half in records_of(store_dir, HALF):
        found.setdefault(half.body, []).append(int(props(half).get("TRANSACTION_CHECK_TIMES", 0)))
    return found
