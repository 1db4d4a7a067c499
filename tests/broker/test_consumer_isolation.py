"""One group's retry copy being stored never stalls another group (issue 29).

Against a broker process (``held_retry_broker.py``: the real broker, whose puts into
``%RETRY%`` topics wait while a hold file exists, as a SYNC put waits behind a slow fsync):
group ``nacker`` nacks its message, and its next receive hands the message to its retry topic,
whose put is held. Meanwhile group ``reader`` receives and acknowledges the same topic's
message. Before, a pop stored the copy under one lock for all groups, so the reader's receive
waited for the nacker's put. While the copy is not stored, the nacker's persisted offset does
not pass the message, and a broker killed then delivers it again after a restart.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

from broker_harness import read_records, start_broker, wait_for

from rmq_spark.broker.config_files.rocketmq_config_files import read_consumer_offsets
from rmq_spark.broker.consumer_client import Consumer
from rmq_spark.broker.producer import Producer
from rmq_spark.errors import BrokerError

_WRAPPER = str(Path(__file__).with_name("held_retry_broker.py"))
_INVISIBLE_MS = 10_000


def _offset(store: Path, group: str) -> int | None:
    return read_consumer_offsets(store).get(("orders", group), {}).get(0)


def _receive_until_killed(consumer: Consumer) -> None:
    with contextlib.suppress(BrokerError):
        consumer.receive(1, _INVISIBLE_MS, wait_ms=1_000)


def _receive_one(consumer: Consumer) -> Any:
    return wait_for(
        lambda: consumer.receive(1, _INVISIBLE_MS, wait_ms=1_000), 30, f"{consumer.group}'s message"
    )[0]


def test_a_group_receives_and_acks_while_another_groups_retry_copy_is_being_stored(
    tmp_path: Path,
) -> None:
    hold, held = tmp_path / "hold", tmp_path / "held"
    broker = start_broker(
        tmp_path / "store",
        tmp_path / "work",
        "broker.topics=orders:1",
        entry=(_WRAPPER, str(hold), str(held)),
    )
    nacked: list[Any] = []
    try:
        with (
            Producer(broker.address) as producer,
            Consumer(broker.address, "nacker", "orders") as nacker,
            Consumer(broker.address, "reader", "orders", request_timeout_s=20) as reader,
        ):
            sent = producer.send("orders", b"m1").message_id
            first = _receive_one(nacker)
            hold.touch()
            nacker.change_invisible_duration(first, 0)  # a nack: its retry copy comes next
            retrying = threading.Thread(
                target=lambda: nacked.extend(nacker.receive(1, _INVISIBLE_MS, wait_ms=2_000))
            )
            retrying.start()
            wait_for(held.exists, 30, "the nacker's retry put to be held")

            got = reader.receive(1, _INVISIBLE_MS, wait_ms=5_000)
            assert [m.message_id for m in got] == [sent]
            reader.ack(got[0])
            wait_for(lambda: _offset(broker.store_dir, "reader") == 1, 30, "reader's offset")
            assert _offset(broker.store_dir, "nacker") == 0  # not past a copy not yet stored
            assert hold.exists() and retrying.is_alive()  # the put was held all along

            hold.unlink()
            retrying.join(timeout=60)
            assert not retrying.is_alive() and nacked == []
            wait_for(lambda: _offset(broker.store_dir, "nacker") == 1, 30, "nacker's offset")
        copies = [r for r in read_records(broker.store_dir) if r.topic == "SCHEDULE_TOPIC_XXXX"]
        assert len(copies) == 1 and copies[0].reconsume_times == 1
    finally:
        hold.unlink(missing_ok=True)
        broker.stop()


def test_a_broker_killed_while_a_retry_copy_is_being_stored_delivers_the_message_again(
    tmp_path: Path,
) -> None:
    hold, held = tmp_path / "hold", tmp_path / "held"
    store = tmp_path / "store"
    broker = start_broker(
        store, tmp_path / "work", "broker.topics=orders:1", entry=(_WRAPPER, str(hold), str(held))
    )
    try:
        with (
            Producer(broker.address) as producer,
            Consumer(broker.address, "nacker", "orders") as nacker,
        ):
            sent = producer.send("orders", b"m1").message_id
            nacker.change_invisible_duration(_receive_one(nacker), 0)
            hold.touch()
            threading.Thread(target=_receive_until_killed, args=(nacker,), daemon=True).start()
            wait_for(held.exists, 30, "the nacker's retry put to be held")
            broker.kill()
    finally:
        hold.unlink(missing_ok=True)
        broker.kill()
    again = start_broker(store, tmp_path / "work", "broker.topics=orders:1")
    try:
        with Consumer(again.address, "nacker", "orders") as nacker:
            message = _receive_one(nacker)
            assert message.message_id == sent  # its attempts persist with the next save only
    finally:
        again.stop()
