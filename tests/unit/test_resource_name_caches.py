"""The names a request's resources resolve to are kept for the next call, but only names of
a legal length: a client making up a long name per call cannot fill the broker's memory."""

from __future__ import annotations

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.security import resources
from rmq_spark.broker.security.resources import Refused, Resolved, resolve


def _kept() -> list[tuple[object, ...]]:
    caches = (
        resources._NAMED, resources._JUDGED, resources._ONE_MESSAGE_SENDS,
        resources._CONSUMER_CALLS,
    )  # fmt: skip
    return [key for cache in caches for key in cache]


def _send(topic: str) -> spb.SendMessageRequest:
    return spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=topic), body=b"x")])


def test_a_one_message_send_resolves_to_the_same_names_again() -> None:
    first = resolve("SendMessage", _send("Orders"))
    assert isinstance(first, Resolved) and first.topic.full == "Orders"
    assert resolve("SendMessage", _send("Orders")) is first
    two = spb.SendMessageRequest(messages=list(_send("A").messages) + list(_send("B").messages))
    both = resolve("SendMessage", two)
    assert isinstance(both, Resolved) and [t.name for t in both.topics] == ["A", "B"]


def test_names_longer_than_any_legal_one_are_resolved_but_never_kept() -> None:
    long = "T" * 100_000
    sent = resolve("SendMessage", _send(long))
    assert isinstance(sent, Resolved) and sent.topic.name == long
    route = resolve("QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name=long)))
    assert isinstance(route, Refused) and route.code == pb.ILLEGAL_TOPIC
    receive = spb.ReceiveMessageRequest(group=pb.Resource(name="G" * 100_000))
    receive.message_queue.topic.name = "Orders"
    assert isinstance(resolve("ReceiveMessage", receive), Refused)
    assert all(sum(len(p) for p in key if isinstance(p, str)) <= 1024 for key in _kept())
