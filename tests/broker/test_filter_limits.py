"""SQL92/TAG filters are bounded: length, nesting depth, and a cache of compiled filters.

Before: one ReceiveMessage with a 1 MB string literal took the broker from 57 to 253 MB
(the lexer's regex held ~190 bytes per character), and 200 nested parentheses, 5,000 NOTs or
20,000 ORs ended as INTERNAL_SERVER_ERROR "maximum recursion depth exceeded" with an ERROR
line each. Now an expression over ``EXPRESSION_LENGTH_MAX`` characters or nested deeper than
``SQL92_DEPTH_MAX`` is answered ILLEGAL_FILTER_EXPRESSION in one short line, and a long flat
OR chain within the length limit compiles and evaluates.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from broker_harness import BrokerProcess, start_broker

from rmq_spark.broker.filters import expression as filters
from rmq_spark.broker.filters.expression import (
    CACHED_FILTERS_MAX,
    EXPRESSION_LENGTH_MAX,
    compile_filter,
)
from rmq_spark.broker.filters.sql92 import SQL92_DEPTH_MAX
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.errors import FilterExpressionError

_METADATA = (("x-mq-client-id", "filter-limits"), ("x-mq-language", "JAVA"))
_MB = 1024 * 1024
# Stated bound: a 4 MB filter (refused) raises the broker's peak RSS by less than this
# (gRPC's copy of the request and protobuf's; before: ~780 MB).
_PEAK_GROWTH_MB = 64


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("filter-limits")
    process = start_broker(root / "store", root / "work", "broker.topics=filtered:1")
    yield process
    process.stop()


@pytest.fixture
def stub(broker: BrokerProcess) -> Iterator[Any]:
    with grpc.insecure_channel(broker.address) as channel:
        yield spb_grpc.MessagingServiceStub(channel)


def _receive(
    stub: Any, expression: str, kind: int = pb.SQL, group: str = "filter-readers", wait_ms: int = 0
) -> list[Any]:
    request = spb.ReceiveMessageRequest(batch_size=1)
    request.message_queue.topic.name = "filtered"
    request.group.name = group
    request.filter_expression.type = kind
    request.filter_expression.expression = expression
    request.long_polling_timeout.FromMilliseconds(wait_ms)
    request.invisible_duration.FromSeconds(30)
    return list(stub.ReceiveMessage(request, timeout=30, metadata=_METADATA))


def _vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM line")


def test_a_huge_literal_is_refused_without_amplifying_memory(
    stub: Any, broker: BrokerProcess
) -> None:
    assert _receive(stub, "a = 'warm'")[0].status.code == pb.MESSAGE_NOT_FOUND
    before = _vm_hwm_mb(broker.proc.pid)
    for kind in (pb.SQL, pb.TAG):
        text = "a = '" + "x" * (4 * _MB) + "'" if kind == pb.SQL else "a||" * (_MB + 1)
        status = _receive(stub, text, kind)[0].status
        assert status.code == pb.ILLEGAL_FILTER_EXPRESSION
        assert f"more than the {EXPRESSION_LENGTH_MAX} allowed" in status.message
        assert len(status.message) < 1000 and "\n" not in status.message
    growth = _vm_hwm_mb(broker.proc.pid) - before
    assert growth < _PEAK_GROWTH_MB, f"peak RSS grew {growth:.0f} MB"


@pytest.mark.parametrize(
    "expression",
    [
        "(" * 200 + "a = 1" + ")" * 200,
        "NOT " * 5000 + "a",
        "- " * 3000 + "a > 1",
        "a = TRUE" + " = TRUE" * 1500,
        " OR ".join(["a = 1"] * 20_000),  # over the length limit
    ],
    ids=["parentheses", "nots", "minus", "equality-chain", "ors"],
)
def test_deep_or_long_expressions_get_illegal_filter_expression(
    stub: Any, broker: BrokerProcess, expression: str
) -> None:
    [status, *_] = _receive(stub, expression)
    assert status.status.code == pb.ILLEGAL_FILTER_EXPRESSION, status.status
    assert len(status.status.message) < 1000
    log = broker.log_text()
    assert " ERROR " not in log and "Traceback" not in log and "recursion" not in log


def test_a_long_flat_or_chain_within_the_limit_matches(stub: Any) -> None:
    message = pb.Message(body=b"needle")
    message.topic.name = "filtered"
    message.user_properties["k"] = "v1199"
    message.system_properties.message_id = "or-chain-1"
    message.system_properties.message_type = pb.NORMAL
    sent = stub.SendMessage(
        spb.SendMessageRequest(messages=[message]), timeout=30, metadata=_METADATA
    )
    assert sent.status.code == pb.OK
    chain = " OR ".join(f"k='v{i}'" for i in range(1200))  # 1,200 terms, ~14 K characters
    assert len(chain) <= EXPRESSION_LENGTH_MAX
    got = _receive(stub, chain, group="or-chain-readers", wait_ms=10_000)
    assert got[0].status.code == pb.OK, got[0].status
    assert [r.message.body for r in got if r.HasField("message")] == [b"needle"]


def test_depth_limit_is_exact_and_the_cache_is_bounded() -> None:
    at_limit = "(" * SQL92_DEPTH_MAX + "a" + ")" * SQL92_DEPTH_MAX
    compile_filter("SQL92", at_limit)
    with pytest.raises(FilterExpressionError, match="nests deeper than"):
        compile_filter("SQL92", "(" + at_limit + ")")
    first = compile_filter("SQL92", "a > 1")
    assert compile_filter("SQL92", "a > 1") is first  # compiled once
    for i in range(CACHED_FILTERS_MAX + 10):
        compile_filter("TAG", f"t{i}")
    assert filters._compile.cache_info().currsize == CACHED_FILTERS_MAX
    assert compile_filter("SQL92", "a > 1") is not first  # the oldest went first
