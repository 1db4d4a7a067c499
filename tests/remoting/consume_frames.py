"""Helpers for the consume-code tests: the frames a 4.x consumer sends, built by hand."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from broker.broker_harness import wait_for
from remoting_harness import FrameClient

from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode
from rmq_spark.store.codec import DecodedRecord, decode_record
from rmq_spark.store.message import MessageRecord

_OPAQUE = iter(range(1, 1 << 30))


def request(code: int, fields: dict[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
    ext = {k: str(v) for k, v in (fields or {}).items()}
    return RemotingCommand(code=int(code), opaque=next(_OPAQUE), ext_fields=ext, body=body)


def call(client: FrameClient, command: RemotingCommand) -> RemotingCommand:
    """Send ``command`` and read its response, skipping the broker's own requests to the client
    (NOTIFY_CONSUMER_IDS_CHANGED), as a client's dispatcher does."""
    client.send(command)
    while True:
        answer = client.read()
        if answer.is_response and answer.opaque == command.opaque:
            return answer


def heartbeat_body(
    client_id: str,
    group: str,
    topics: dict[str, tuple[str, str]],
    *,
    model: str = "CLUSTERING",
    version: int = 1,
) -> bytes:
    """``topics``: topic -> (expression type, expression)."""
    subs = [
        {"topic": t, "expressionType": kind, "subString": expr, "subVersion": version}
        for t, (kind, expr) in topics.items()
    ]
    data = {
        "groupName": group,
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": model,
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        "subscriptionDataSet": subs,
        "unitMode": False,
    }
    beat = {
        "clientID": client_id,
        "consumerDataSet": [data],
        "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
    }
    return json.dumps(beat).encode()


def heartbeat(
    client: FrameClient, client_id: str, group: str, topic: str, expr: str = "*", kind: str = "TAG"
) -> RemotingCommand:
    body = heartbeat_body(client_id, group, {topic: (kind, expr)})
    return call(client, request(RequestCode.HEART_BEAT, body=body))


def pull(
    client: FrameClient,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    max_msgs: int = 32,
    flags: int = 0,
    suspend_ms: int = 0,
    commit: int = 0,
    **extra: Any,
) -> RemotingCommand:
    fields = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": max_msgs,
        "sysFlag": flags,
        "commitOffset": commit,
        "suspendTimeoutMillis": suspend_ms,
        "subVersion": 0,
        **extra,
    }
    return call(client, request(RequestCode.PULL_MESSAGE, fields))


def records(body: bytes) -> list[MessageRecord]:
    """The records of a pull body, decoded as a client does (each must be whole)."""
    out = []
    position = 0
    while position < len(body):
        outcome = decode_record(body, position)
        assert isinstance(outcome, DecodedRecord), outcome
        out.append(outcome.record)
        position += outcome.total_size
    return out


def offset_of(answer: RemotingCommand, name: str = "offset") -> int:
    assert answer.ext_fields is not None, answer
    return int(answer.ext_fields[name])


Ask = Callable[[int, dict[str, Any]], RemotingCommand]


def wait_dispatched(ask: Ask, topic: str, count: int, queue_id: int = 0) -> None:
    """Wait until ``count`` units of ``topic``'s queue are dispatched. A send is acknowledged
    before its ConsumeQueue unit is written (dispatch runs behind the put, as RocketMQ's
    reput does), so a pull right after a send may find nothing yet."""
    fields = {"topic": topic, "queueId": queue_id}
    wait_for(
        lambda: offset_of(ask(RequestCode.GET_MAX_OFFSET, fields)) >= count,
        10,
        f"{count} dispatched units of {topic}:{queue_id}",
    )
