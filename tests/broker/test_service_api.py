"""``BrokerService``'s three entry points, the ones every front maps its wire calls to:
``send`` (and ``send_async``), ``send_back`` and ``redeliver``, over a real store."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.consumer import send_back
from rmq_spark.broker.embedded import Broker
from rmq_spark.broker.redelivery import REDELIVERY_REFUSED, RedeliveryRef
from rmq_spark.broker.service import BrokerService, SendCode, SendCommand
from rmq_spark.clock import ManualClock
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore

_SEGMENT = 16 * 1024 * 1024


def _broker(root: Path) -> Broker:
    config = StoreConfig(root_dir=root, segment_size_bytes=_SEGMENT)
    return Broker(
        root,
        broker_config=BrokerConfig(default_queue_count=1),
        store_config=config,
        clock=ManualClock(),
    )


def _ref(physical_offset: int) -> RedeliveryRef:
    return RedeliveryRef("SCHEDULE_TOPIC_XXXX", 2, 0, physical_offset, 0, "m")


def test_send_back_by_receipt_copies_the_delivery_into_the_groups_retry_topic(
    tmp_path: Path,
) -> None:
    with _broker(tmp_path / "store") as broker:
        broker.send("orders", b"failed once")
        with broker.consumer("billing", "orders") as consumer:
            [message] = consumer.receive(wait_ms=1000)
        record = send_back.ByReceipt("orders", message.receipt_handle)
        result = broker.service.send_back("billing", record)
        assert not isinstance(result, send_back.Refused) and result.ok, result
        assert result.topic == "SCHEDULE_TOPIC_XXXX"  # the retry copy waits its delay level
        again = broker.service.send_back("billing", record)  # that delivery is acknowledged
        assert isinstance(again, send_back.Refused)


def test_send_back_by_offset_refuses_a_record_no_group_reads(tmp_path: Path) -> None:
    with _broker(tmp_path / "store") as broker:
        sent = broker.send("orders", b"later", delay_level=3)  # a schedule record
        assert sent.ok and sent.topic == "SCHEDULE_TOPIC_XXXX"
        refused = broker.service.send_back("billing", send_back.ByOffset(sent.physical_offset))
        assert isinstance(refused, send_back.Refused)


def test_a_service_without_consumer_groups_refuses_send_backs(tmp_path: Path) -> None:
    config = StoreConfig(root_dir=tmp_path / "store", segment_size_bytes=_SEGMENT)
    with MessageStore.open(config) as store:
        service = BrokerService(store)
        refused = service.send_back("billing", send_back.ByOffset(0))
        assert isinstance(refused, send_back.Refused)


def test_redeliver_refuses_what_is_no_due_schedule_record_and_stores_nothing(
    tmp_path: Path,
) -> None:
    with _broker(tmp_path / "store") as broker:
        sent = broker.send("orders", b"plain")
        before = broker.store.max_offset
        unreadable = broker.service.redeliver("the request named no record", "m-1")
        plain = broker.service.redeliver(_ref(sent.physical_offset), "m-2")
        for outcome in (unreadable, plain):
            assert (outcome.code, outcome.reason) == (SendCode.BAD_REQUEST, REDELIVERY_REFUSED)
        assert broker.store.max_offset == before


def test_every_entry_point_refuses_once_a_shutdown_began(tmp_path: Path) -> None:
    with _broker(tmp_path / "store") as broker:
        broker.service.begin_shutdown()
        command = SendCommand(topic="orders", body=b"late", message_id="m-3")
        outcomes = [
            broker.service.send(command),
            asyncio.run(broker.service.send_async(command)),
            broker.service.redeliver(_ref(0), "m-4"),
        ]
        assert [o.code for o in outcomes] == [SendCode.SHUTTING_DOWN] * 3
        assert broker.service.wait_idle(0)
