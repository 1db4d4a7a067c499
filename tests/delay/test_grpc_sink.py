"""Redelivery through a broker over gRPC (``--broker``): the broker down, then up; the
records it stores equal the in-process job's; what a redelivery request may not do."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
from pathlib import Path

import grpc
import pytest
from delay_world import START_MS, TEST_LEVELS, DelayWorld, make_world, store_config

from rmq_spark.broker.embedded import Broker
from rmq_spark.broker.grpc.grpc_client import messaging_channel
from rmq_spark.broker.grpc.store_rpc import store_stub
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.redelivery import (
    REDELIVERY_HANDLE_PREFIX,
    REDELIVERY_REFUSED,
    RedeliveryRef,
    ref_to_message,
)
from rmq_spark.broker.security.auth import (
    STORE_ACCESS_KEY,
    read_redelivery_secret,
    signature_metadata,
)
from rmq_spark.clock import ManualClock
from rmq_spark.config import load_config
from rmq_spark.delay.job import ScheduleJobSpec, run_schedule
from rmq_spark.delay.log_reader import LogReader
from rmq_spark.delay.sink import GrpcSink
from rmq_spark.errors import RedeliveryFailedError
from rmq_spark.store.message import HostAddress
from rmq_spark.store.properties import parse_properties
from rmq_spark.store.put import PutRequest


def dead_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"  # nothing listens once closed


def test_once_with_the_broker_down_fails_clearly_and_marks_nothing_done(tmp_path: Path) -> None:
    root = tmp_path / "store"
    world = make_world(root)
    world.put_delayed("orders", b"a", 1, UNIQ_KEY="UA")
    world.put_timer("orders", b"t", START_MS + 1200)
    clock = world.clock
    world.broker.close()
    clock.advance(2000)
    config = load_config(None, {"store.message_delay_level": TEST_LEVELS})
    spec = ScheduleJobSpec(store_dir=root, broker=dead_address(), once=True)

    with pytest.raises(RedeliveryFailedError, match="broker unreachable"):
        run_schedule(spec, config, clock=clock)

    journal = json.loads((root / "config" / "scheduleJournal.json").read_text())
    assert journal["levels"] == {} and journal["timer"]["low_water"] == 0
    assert journal["intent"] is not None  # settled by the next run
    assert '"offsetTable":{}' in (root / "config" / "delayOffset.json").read_text()

    # The broker comes back: the next run delivers both, once.
    broker = Broker(root, store_config=store_config(root), clock=clock, listen="127.0.0.1:0")
    try:
        spec = ScheduleJobSpec(store_dir=root, broker=broker.address, once=True)
        assert run_schedule(spec, config, clock=clock) == 0
        assert run_schedule(spec, config, clock=clock) == 0
        broker.store.flush()
        with LogReader(root) as reader:
            delivered = [s.record for s in reader.scan(0, {"orders"})]
    finally:
        broker.close()
    assert sorted(r.body for r in delivered) == [b"a", b"t"]
    by_body = {r.body: parse_properties(r.properties) for r in delivered}
    assert by_body[b"a"]["UNIQ_KEY"] == "UA"  # the original message id travels as UNIQ_KEY
    assert all(r.store_timestamp_ms >= START_MS + 1200 for r in delivered)
    journal = json.loads((root / "config" / "scheduleJournal.json").read_text())
    assert journal["intent"] is None and journal["levels"]["1"]["low_water"] == 1


def put_schedule_records(world: DelayWorld) -> None:
    """Delay-level messages with everything messageTimeup copies, a consumer retry (a
    ``%RETRY%`` real topic, which ordinary sends may not use) and timer messages."""
    store = world.broker.store
    for index, (level, flag, reconsume) in enumerate([(1, 0, 0), (2, 7, 3), (3, 1, 16)]):
        result = store.put(
            PutRequest(
                topic="orders",
                queue_id=index,
                body=f"level-{level}".encode(),
                properties={"DELAY": str(level), "UNIQ_KEY": f"U{index}", "TAGS": "TagA"},
                flag=flag,
                reconsume_times=reconsume,
                born_timestamp_ms=START_MS - 5000 - index,
                born_host=HostAddress.parse("10.1.2.3:4567"),
            )
        )
        assert result.ok, result
    retry = store.put(
        PutRequest(
            topic="%RETRY%group-a",
            body=b"retry",
            properties={"DELAY": "2", "UNIQ_KEY": "U-retry", "RETRY_TOPIC": "orders"},
            reconsume_times=1,
        )
    )
    assert retry.ok, retry
    world.put_timer("orders", b"timer-1", START_MS + 1500)
    world.put_timer("payments", b"timer-2", START_MS + 2600)


FIELDS = (
    "topic", "body", "properties", "queue_id", "flag", "sys_flag", "born_timestamp_ms",
    "born_host", "store_host", "reconsume_times", "prepared_transaction_offset", "body_crc",
)  # fmt: skip


def stored(world_root: Path, topics: set[str]) -> list[tuple[object, ...]]:
    with LogReader(world_root) as reader:
        records = [s.record for s in reader.scan(0, topics)]
    return sorted(tuple(getattr(r, name) for name in FIELDS) for r in records)


def test_redelivery_over_grpc_stores_exactly_what_the_in_process_job_stores(
    tmp_path: Path,
) -> None:
    local, remote = tmp_path / "local", tmp_path / "remote"
    world = make_world(local)
    put_schedule_records(world)
    world.broker.close()
    shutil.copytree(local, remote)  # the same schedule records in two stores
    topics = {"orders", "payments"}  # retry records are the broker's RetryReviver's

    results = {}
    for root, over_grpc in ((local, False), (remote, True)):
        clock = ManualClock(START_MS)
        broker = Broker(
            root,
            store_config=store_config(root),
            clock=clock,
            listen="127.0.0.1:0" if over_grpc else None,
        )
        world = DelayWorld(root, clock, broker)
        sink = GrpcSink(broker.address, root, clock=clock) if over_grpc else None
        try:
            redeliverer = world.redeliverer(sink)
            for _ in range(4):  # the same pass times on both sides (TIMER_DEQUEUE_MS)
                clock.advance(1000)
                report = redeliverer.run_pass()
                assert report.error is None and report.refused == 0 and report.early == 0
            redeliverer.close()
        finally:
            if sink is not None:
                sink.close()
            broker.close()
        results[over_grpc] = stored(root, topics)

    assert len(results[False]) == 5
    assert results[True] == results[False]
    by_body = {row[1]: dict(zip(FIELDS, row, strict=True)) for row in results[True]}
    level_2 = by_body[b"level-2"]
    assert (level_2["queue_id"], level_2["flag"], level_2["reconsume_times"]) == (1, 7, 3)
    assert str(level_2["born_host"]) == "10.1.2.3:4567"
    properties = parse_properties(level_2["properties"])
    assert properties["DELAY"] == "2" and properties["REAL_TOPIC"] == "orders"
    timer = parse_properties(by_body[b"timer-1"]["properties"])
    assert timer["TIMER_DEQUEUE_MS"] == str(START_MS + 2000)


def send_plain(address: str, message: object) -> object:
    """An ordinary SendMessage."""
    channel, stub = messaging_channel(address)
    try:
        response = stub.SendMessage(spb.SendMessageRequest(messages=[message]), timeout=10)
        return response.entries[0].status
    finally:
        channel.close()


def send_raw(address: str, message: object, metadata: tuple[tuple[str, str], ...] = ()) -> object:
    """A redelivery request, through StoreService.Redeliver."""
    channel = grpc.insecure_channel(address)
    try:
        request = spb.SendMessageRequest(messages=[message])
        response = store_stub(channel).Redeliver(request, timeout=10, metadata=metadata)
        return response.entries[0].status
    finally:
        channel.close()


def test_a_redelivery_request_cannot_store_anything_but_a_due_schedule_record(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    world = make_world(root)
    world.put_delayed("orders", b"a", 2, UNIQ_KEY="UA")
    world.put_delayed("orders", b"b", 1, UNIQ_KEY="UB")
    world.broker.close()
    clock = ManualClock(START_MS + 1500)  # level 1 is due, level 2 is not
    broker = Broker(root, store_config=store_config(root), clock=clock, listen="127.0.0.1:0")
    try:
        with LogReader(root) as reader:
            schedule = [s for s in reader.scan(0, {"SCHEDULE_TOPIC_XXXX"})]
        level_2, level_1 = schedule
        ref = RedeliveryRef(
            "SCHEDULE_TOPIC_XXXX", 1, 0, level_2.physical_offset, clock.now_ms(), "UA"
        )
        # Signed as the schedule job (the store's secret); every refusal is the same reply.
        secret = read_redelivery_secret(root)
        assert secret is not None
        signed = signature_metadata(STORE_ACCESS_KEY, secret, clock.now_ms())
        refused = (pb.BAD_REQUEST, REDELIVERY_REFUSED)
        status = send_raw(broker.address, ref_to_message(ref), signed)
        assert (status.code, status.message) == refused, status  # not due: never early

        wrong_queue = dataclasses.replace(ref, queue_id=0)  # names another record
        status = send_raw(broker.address, ref_to_message(wrong_queue), signed)
        assert (status.code, status.message) == refused, status

        with_body = ref_to_message(dataclasses.replace(ref, queue_id=0, queue_offset=0))
        with_body.system_properties.receipt_handle = (
            f"{REDELIVERY_HANDLE_PREFIX}{level_1.physical_offset}"
        )
        with_body.body = b"smuggled"  # content of its own: refused, nothing stored
        bad_handle = ref_to_message(ref)
        bad_handle.system_properties.receipt_handle = f"{REDELIVERY_HANDLE_PREFIX}x"
        status = send_raw(broker.address, bad_handle, signed)
        assert (status.code, status.message) == refused, status
        status = send_raw(broker.address, with_body, signed)
        assert (status.code, status.message) == refused, status

        ordinary = pb.Message(body=b"x")  # an ordinary send to the schedule topic
        ordinary.topic.name = "SCHEDULE_TOPIC_XXXX"
        ordinary.system_properties.message_id = "M1"
        ordinary.system_properties.body_encoding = pb.IDENTITY
        status = send_plain(broker.address, ordinary)
        assert status.code == pb.ILLEGAL_TOPIC, status  # the topic rules apply

        ordinary.system_properties.receipt_handle = with_body.system_properties.receipt_handle
        ordinary.topic.resource_namespace = "ns"  # not a redelivery: the topic rules apply
        assert send_plain(broker.address, ordinary).code == pb.ILLEGAL_TOPIC
        assert send_raw(broker.address, ordinary, signed).message == REDELIVERY_REFUSED

        due = dataclasses.replace(
            ref, queue_id=0, physical_offset=level_1.physical_offset, message_id="UB"
        )
        assert send_raw(broker.address, ref_to_message(due), signed).code == pb.OK
        broker.store.flush()
        assert [r.body for r in world.records("orders")] == [b"b"]
    finally:
        broker.close()
