"""bench/relay_cost.py: a scripted front drives a real broker; its py-spy layers."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "relay_cost.py"


@pytest.fixture(scope="module")
def relay_cost() -> ModuleType:
    spec = importlib.util.spec_from_file_location("relay_cost", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["relay_cost"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("stack", "layer"),
    [
        (
            "GrpcEndpoint._run (rmq_spark/broker/server.py:1);Handle._run (asyncio/events.py:80)"
            ";AsyncPuts._write (rmq_spark/store/async_puts.py:90)"
            ";Appender.append_batch (rmq_spark/store/appender.py:330)",
            "store: the pass's batch append (encode, CRC, write)",
        ),
        (
            "GrpcEndpoint._run (rmq_spark/broker/server.py:1)"
            ";RingCommit.pump (rmq_spark/store/ring_commit.py:9)"
            ";pwrite_all (rmq_spark/store/file_ops.py:133)",
            "store: group commit, fdatasync submit and finish",
        ),
        (
            "GrpcEndpoint._run (rmq_spark/broker/server.py:1)"
            ";_gated.<locals>.unary_unary (rmq_spark/broker/security/auth_grpc.py:211)"
            ";ProducerRpcs.send_message (rmq_spark/broker/grpc/grpc_producer.py:94)"
            ";BrokerService._place (rmq_spark/broker/service.py:429)",
            "broker: validate, route, properties",
        ),
        (
            "GrpcEndpoint._run (rmq_spark/broker/server.py:1);Handle._run (asyncio/events.py:80)",
            "asyncio machinery (tasks, loop, sockets; no frame of ours)",
        ),
    ],
)
def test_a_sample_is_put_in_the_layer_of_its_innermost_frame_of_ours(
    relay_cost: ModuleType, stack: str, layer: str
) -> None:
    assert relay_cost.layer_of(stack.split(";")) == layer


def test_a_scripted_front_drives_a_real_broker_and_reports_its_cost(
    relay_cost: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    before = os.environ.get("RMQ_SPARK_NATIVE_FRONT")
    assert relay_cost.main(["--rounds", "1", "--seconds", "1", "--warm-up", "0.5"]) == 0
    row = re.search(r"^\| this \| ([\d,]+) \| ([\d.]+) \|$", capsys.readouterr().out, re.M)
    assert row is not None
    assert int(row.group(1).replace(",", "")) > 0 and float(row.group(2)) > 0
    assert os.environ.get("RMQ_SPARK_NATIVE_FRONT") == before  # not left for other brokers
