"""``StoreService.CheckTransaction`` is the store identity's alone: an unsigned, wrongly
signed or other caller gets one uniform refusal that names nothing of the store; the store
identity naming a record that is not a half, a half of another offset, a resolved half or
garbage gets NOTHING_TO_DO and nothing is stored; a half not yet due gets NOT_DUE; a due half
named twice (a job that crashed before saving its progress asks again) is checked once."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from broker_harness import BrokerProcess, props, read_records, wait_for
from tx_helpers import HALF, records_of, send_half
from txcheck_helpers import JOB, check_rpc

from rmq_spark.broker.grpc.grpc_client import client_metadata
from rmq_spark.broker.grpc.store_rpc import store_signed_metadata
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import store_service_pb2 as ssb
from rmq_spark.broker.security.auth import STORE_ACCESS_KEY, signature_metadata

NOTHING, NOT_DUE, CHECKED = ssb.NOTHING_TO_DO, ssb.NOT_DUE, ssb.CHECKED


def _signed(broker: BrokerProcess) -> Any:
    metadata = store_signed_metadata(broker.store_dir, "txcheck-test", int(time.time() * 1000))
    assert metadata is not None
    return metadata


def _outcomes(broker: BrokerProcess, named: list[tuple[int, int]]) -> list[int]:
    response = check_rpc(broker.address, named, _signed(broker))
    assert response.status.code == pb.OK, response.status
    return [r.outcome for r in response.results]


def test_only_the_store_identity_may_check_and_only_a_pending_half(
    tx_broker: Callable[..., BrokerProcess], tx_clients: Callable[..., Any], rocketmq: ModuleType
) -> None:
    broker = tx_broker(JOB, "broker.transaction_timeout_ms=600000")
    producer = tx_clients("producer", broker.address, ("orders",), lambda m: 0)
    send_half(rocketmq, producer, "orders", b"pending")
    transaction, _ = send_half(rocketmq, producer, "orders", b"committed")
    transaction.commit()
    plain = rocketmq.Message()
    plain.topic, plain.body = "orders", b"plain"
    producer.send(plain)
    wait_for(lambda: len(records_of(broker.store_dir, "orders")) == 2, 30, "the two messages")
    halves = {h.body: h for h in records_of(broker.store_dir, HALF)}
    pending, committed = halves[b"pending"], halves[b"committed"]
    [normal] = [r for r in records_of(broker.store_dir, "orders") if r.body == b"plain"]
    named = [(pending.physical_offset, pending.queue_offset)]
    now_ms = int(time.time() * 1000)
    callers = [
        (),  # unsigned
        client_metadata("x") + signature_metadata(STORE_ACCESS_KEY, "not-the-secret", now_ms),
        client_metadata("x") + signature_metadata("someone", "secret", now_ms),
    ]
    refusals = {check_rpc(broker.address, named, m).SerializeToString() for m in callers}
    [refusal] = refusals
    answer = ssb.CheckTransactionResponse.FromString(refusal)
    assert answer.status.code == pb.FORBIDDEN and not answer.results
    assert answer.status.message == "TRANSACTION_CHECK_REFUSED"
    stored = len(read_records(broker.store_dir))
    assert _outcomes(broker, [(normal.physical_offset, normal.queue_offset)]) == [NOTHING]
    assert _outcomes(broker, [(normal.physical_offset, pending.queue_offset)]) == [NOTHING]
    assert _outcomes(broker, [(committed.physical_offset, committed.queue_offset)]) == [NOTHING]
    assert _outcomes(broker, [(-1, 0), (2**40, 5), (pending.physical_offset, 99)]) == [NOTHING] * 3
    assert _outcomes(broker, named) == [NOT_DUE]
    assert len(read_records(broker.store_dir)) == stored  # nothing re-put, nothing discarded


def test_a_half_named_again_after_it_was_checked_is_already_done(
    tx_broker: Callable[..., BrokerProcess], tx_clients: Callable[..., Any], rocketmq: ModuleType
) -> None:
    broker = tx_broker(JOB, "broker.transaction_timeout_ms=300")
    producer = tx_clients("producer", broker.address, ("orders",), lambda m: 0)
    send_half(rocketmq, producer, "orders", b"orphan")
    [half] = records_of(broker.store_dir, HALF)
    named = [(half.physical_offset, half.queue_offset)]
    outcomes = wait_for(lambda: (o := _outcomes(broker, named)) != [NOT_DUE] and o, 30, "due")
    assert outcomes == [CHECKED]
    assert _outcomes(broker, named) == [NOTHING]  # the job's retry after a crash
    assert _outcomes(broker, named + named) == [NOTHING, NOTHING]
    copies = records_of(broker.store_dir, HALF)
    assert [props(c).get("TRANSACTION_CHECK_TIMES", "0") for c in copies] == ["0", "1"]
    renewed = copies[1]
    twice = [(renewed.physical_offset, renewed.queue_offset)] * 2
    assert _outcomes(broker, twice) == [CHECKED, NOTHING]  # named twice in one request: once
    assert len(records_of(broker.store_dir, HALF)) == 3


USERS = """
[users.alice]
secret_key = "alice-secret-1"
policies = [
    { resource = "Topic:*", actions = ["All"] },
    { resource = "Group:*", actions = ["All"] },
]

[users.scheduler]
secret_key = "scheduler-secret-1"
policies = [{ resource = "Topic:*", actions = ["Redeliver"] }]
"""


def test_with_auth_on_no_user_grant_reaches_the_check(
    tx_broker: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    broker = tx_broker(JOB, "broker.auth_enabled=true", f"broker.auth_users_file={users}")
    named = [(0, 0)]
    now_ms = int(time.time() * 1000)
    for user, secret in (("alice", "alice-secret-1"), ("scheduler", "scheduler-secret-1")):
        metadata = client_metadata(user) + signature_metadata(user, secret, now_ms)
        answer = check_rpc(broker.address, named, metadata)
        assert (answer.status.code, answer.status.message) == (
            pb.FORBIDDEN,
            "TRANSACTION_CHECK_REFUSED",
        )
        assert not answer.results
    assert _outcomes(broker, named) == [NOTHING]  # the store identity, auth on
