"""``grpc_client.failure_code``: a call the server reset at its deadline is a timeout.

The broker's native front (grpc-go) resets a call whose grpc-timeout passed with RST_STREAM
CANCEL; a client whose own deadline timer fires late (a busy machine: a cluster test saw it)
reads CANCELLED, and our clients did not retry it as the timeout it is."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from rmq_spark.broker.grpc.grpc_client import failure_code

METHOD = "/test.Cancels/Call"


@pytest.fixture
def cancelled_call() -> Iterator[grpc.RpcError]:
    """A real failed call: an in-process server that ends it CANCELLED."""

    def cancel(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.abort(grpc.StatusCode.CANCELLED, "reset at the deadline")

    handler = grpc.method_handlers_generic_handler(
        "test.Cancels", {"Call": grpc.unary_unary_rpc_method_handler(cancel)}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=1), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.RpcError) as failed:
                channel.unary_unary(METHOD)(b"", timeout=5.0)
            yield failed.value
    finally:
        server.stop(None)


def test_cancelled_at_the_deadline_is_a_timeout(cancelled_call: grpc.RpcError) -> None:
    assert cancelled_call.code() == grpc.StatusCode.CANCELLED
    assert failure_code(cancelled_call, 1.0, 1.0) == grpc.StatusCode.DEADLINE_EXCEEDED
    assert failure_code(cancelled_call, 1.0, 3.5) == grpc.StatusCode.DEADLINE_EXCEEDED
    # the request's time in flight: the server's deadline comes a little before the client's
    assert failure_code(cancelled_call, 1.0, 0.99) == grpc.StatusCode.DEADLINE_EXCEEDED


def test_cancelled_before_the_deadline_stays_cancelled(cancelled_call: grpc.RpcError) -> None:
    assert failure_code(cancelled_call, 1.0, 0.5) == grpc.StatusCode.CANCELLED
    assert failure_code(cancelled_call, 1.0, 0.0) == grpc.StatusCode.CANCELLED


def test_other_failures_keep_their_code() -> None:
    with grpc.insecure_channel("127.0.0.1:1") as channel:  # nothing listens on port 1
        with pytest.raises(grpc.RpcError) as failed:
            channel.unary_unary(METHOD)(b"", timeout=2.0)
    assert failure_code(failed.value, 2.0, 2.0) == grpc.StatusCode.UNAVAILABLE
    assert failure_code(ValueError("not a call"), 1.0, 1.0) is None
