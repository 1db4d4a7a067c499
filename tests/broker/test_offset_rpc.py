"""UpdateOffset / GetOffset / QueryOffset against a real broker process, on the wire.

As the 5.x proxy's OffsetActivity: an update commits (and may move back; clamped to the
queue), is in consumerOffset.json when the reply comes and survives a restart; a receive
starts at the committed offset; QueryOffset answers BEGINNING, END and TIMESTAMP.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from broker_harness import BrokerProcess, start_broker

from rmq_spark.broker.config_files.rocketmq_config_files import (
    read_consumer_offsets,
    write_consumer_offsets,
)
from rmq_spark.broker.consumer.persist import commit_offsets_offline, offsets_file_lock
from rmq_spark.broker.consumer_client import Consumer
from rmq_spark.broker.producer import Producer
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.errors import StoreLockedError

_TOPIC = "ledger"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path / "store", tmp_path / "work", f"broker.topics={_TOPIC}:1")
    yield process
    process.stop()


def _stub(address: str) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(address)
    return channel, spb_grpc.MessagingServiceStub(channel)


def _queue(topic: str = _TOPIC, queue_id: int = 0) -> Any:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id)


def _update(stub: Any, offset: int, group: str = "books", **queue: Any) -> int:
    request = spb.UpdateOffsetRequest(
        group=pb.Resource(name=group), message_queue=_queue(**queue), offset=offset
    )
    return int(stub.UpdateOffset(request, timeout=10).status.code)


def _get(stub: Any, group: str = "books", **queue: Any) -> tuple[int, int]:
    request = spb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=_queue(**queue))
    reply = stub.GetOffset(request, timeout=10)
    return int(reply.status.code), int(reply.offset)


def _query(stub: Any, policy: int, timestamp_ms: int | None = None) -> tuple[int, int]:
    request = spb.QueryOffsetRequest(message_queue=_queue(), query_offset_policy=policy)
    if timestamp_ms is not None:
        request.timestamp.FromMilliseconds(timestamp_ms)
    reply = stub.QueryOffset(request, timeout=10)
    return int(reply.status.code), int(reply.offset)


def _wait_dispatched(stub: Any, count: int) -> None:
    deadline = time.monotonic() + 20
    while _query(stub, pb.END)[1] < count:
        assert time.monotonic() < deadline, "the ConsumeQueue never reached the sent messages"
        time.sleep(0.05)


def test_offsets_commit_read_back_persist_and_steer_a_receive(broker: BrokerProcess) -> None:
    channel, stub = _stub(broker.address)
    with channel, Producer(broker.address) as producer:
        for i in range(5):
            producer.send(_TOPIC, f"m{i}".encode())
        _wait_dispatched(stub, 5)
        assert _get(stub)[0] == pb.OFFSET_NOT_FOUND
        assert _query(stub, pb.BEGINNING) == (pb.OK, 0)
        assert _query(stub, pb.END) == (pb.OK, 5)
        assert _update(stub, 3) == pb.OK
        # In the file when the reply comes: `rmq-spark groups` sees it at once.
        assert read_consumer_offsets(broker.store_dir)[(_TOPIC, "books")] == {0: 3}
        assert _get(stub) == (pb.OK, 3)
        assert _update(stub, 1) == pb.OK  # RocketMQ's commitOffset: it may move back
        assert _get(stub) == (pb.OK, 1)
        assert _update(stub, 99) == pb.OK
        assert _get(stub) == (pb.OK, 5)  # clamped to the queue's end
        assert _update(stub, 3) == pb.OK
    with Consumer(broker.address, "books", _TOPIC) as consumer:
        got = consumer.receive(invisible_ms=10_000, wait_ms=5_000)
        assert [m.body for m in got] == [b"m3", b"m4"]
    broker.stop()
    again = start_broker(broker.store_dir, broker.store_dir.parent / "work2")
    try:
        channel, stub = _stub(again.address)
        with channel:
            assert _get(stub) == (pb.OK, 3)
    finally:
        again.stop()


def test_query_offset_by_time(broker: BrokerProcess) -> None:
    channel, stub = _stub(broker.address)
    with channel, Producer(broker.address) as producer:
        producer.send(_TOPIC, b"early")
        _wait_dispatched(stub, 1)
        time.sleep(0.05)
        middle_ms = int(time.time() * 1000)
        time.sleep(0.05)
        producer.send(_TOPIC, b"late")
        _wait_dispatched(stub, 2)
        assert _query(stub, pb.TIMESTAMP, 0) == (pb.OK, 0)
        assert _query(stub, pb.TIMESTAMP, middle_ms) == (pb.OK, 1)
        assert _query(stub, pb.TIMESTAMP, middle_ms + 3_600_000) == (pb.OK, 2)
        assert _query(stub, pb.TIMESTAMP)[0] == pb.BAD_REQUEST


def test_bad_offset_requests_get_statuses(broker: BrokerProcess) -> None:
    channel, stub = _stub(broker.address)
    with channel:
        assert _update(stub, 0, group="no spaces") == pb.ILLEGAL_CONSUMER_GROUP
        assert _update(stub, 0, topic="bad topic!") == pb.ILLEGAL_TOPIC
        assert _update(stub, 0, queue_id=7) == pb.BAD_REQUEST
        assert _update(stub, -1) == pb.ILLEGAL_OFFSET
        assert _get(stub, topic="bad topic!")[0] == pb.ILLEGAL_TOPIC


def test_offline_commits_move_forward_only_and_never_beside_a_broker(tmp_path: Path) -> None:
    store = tmp_path / "store"
    process = start_broker(store, tmp_path / "work", f"broker.topics={_TOPIC}:1")
    with Producer(process.address) as producer:
        for i in range(4):
            producer.send(_TOPIC, f"m{i}".encode())
    with pytest.raises(StoreLockedError, match="a broker holds the store"):
        commit_offsets_offline(store, "books", {(_TOPIC, 0): 1})
    process.stop()
    assert commit_offsets_offline(store, "books", {(_TOPIC, 0): 3}) == {(_TOPIC, 0): 3}
    assert commit_offsets_offline(store, "books", {(_TOPIC, 0): 2}) == {}  # a replayed commit
    assert read_consumer_offsets(store)[(_TOPIC, "books")] == {0: 3}
    # A broker starting while an offline writer holds the lock waits, then loads its write.
    started: list[BrokerProcess] = []
    with offsets_file_lock(store):
        starter = threading.Thread(
            target=lambda: started.append(start_broker(store, tmp_path / "work2"))
        )
        starter.start()
        time.sleep(2.0)
        assert not started  # it holds the store and waits for the offsets lock
        write_consumer_offsets(store, {(_TOPIC, "books"): {0: 4}})
    starter.join(60)
    [again] = started
    try:
        channel, stub = _stub(again.address)
        with channel:
            assert _get(stub) == (pb.OK, 4)
    finally:
        again.stop()
