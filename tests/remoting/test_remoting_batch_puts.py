"""SEND_BATCH_MESSAGE's put, in-process over a real SYNC store: the batches in flight are all
written while one fsync is held (their puts wait on the loop, not one worker thread each),
each is answered only once an fsync covers it; a batch is all or nothing, whichever check
refuses one of its messages (the message rules, the delivery-time bound of the timer) or when
the store cannot write. ``BrokerService.send_batch_async`` answers what ``send_batch`` does for
a batch the checks accept."""

from __future__ import annotations

import asyncio
import errno
import struct
import time
from collections.abc import Callable
from pathlib import Path

from store_helpers import GatedOpener, open_store

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.remoting.calls import Call, Deps
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.remoting.produce import handlers
from rmq_spark.broker.service import BrokerService, SendCode, SendCommand
from rmq_spark.store.config import FlushPolicy
from rmq_spark.store.fileio import FaultPlan, FaultyOpener
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.msg_id import decode_offset_msg_id
from rmq_spark.store.properties import encode_properties

BATCHES = 40  # more than a default thread pool's workers, even on a 28-core machine
PER_BATCH = 4


class _Link:
    link_id, peer_host, peer_port, language, version, tls, closed = (
        1, "127.0.0.1", 50000, "JAVA", 409, False, False,
    )  # fmt: skip


def _batch_call(index: int, extra: dict[int, dict[str, str]] | None = None) -> Call:
    """Batch ``index`` of ``PER_BATCH`` messages; ``extra``: more properties of message i."""
    body = bytearray()
    for at in range(PER_BATCH):
        properties = {"UNIQ_KEY": f"B{index:03d}M{at}", "WAIT": "true", **(extra or {}).get(at, {})}
        text = encode_properties(properties).encode()
        payload = f"batch {index} message {at}".encode()
        body += struct.pack(">iiiii", 22 + len(payload) + len(text), 0, 0, 0, len(payload))
        body += payload + struct.pack(">h", len(text)) + text
    fields = {"a": "pg", "b": "Batched", "e": str(index % 4), "f": "0", "g": "1", "i": ""}
    command = RemotingCommand(
        code=RequestCode.SEND_BATCH_MESSAGE, opaque=index, ext_fields=fields, body=bytes(body)
    )
    return Call(command, _Link())  # type: ignore[arg-type]


def _send_batch(store: MessageStore) -> object:
    service = BrokerService(store, BrokerConfig(default_queue_count=4))
    deps = Deps(service=service, store=store, config=service.config)
    return handlers(deps)[RequestCode.SEND_BATCH_MESSAGE]


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def test_batches_in_flight_are_all_written_under_one_held_fsync(tmp_path: Path) -> None:
    opener = GatedOpener()
    store = open_store(tmp_path, opener=opener, flush_policy=FlushPolicy.SYNC)
    send_batch = _send_batch(store)

    async def main() -> tuple[int, list[RemotingCommand]]:
        opener.release.clear()  # the threaded group commit's fsync waits here
        try:
            tasks = [asyncio.create_task(send_batch(_batch_call(i))) for i in range(BATCHES)]
            await _until(lambda: _count(store) == BATCHES)
            written = _count(store)
        finally:
            opener.release.set()
        return written, list(await asyncio.gather(*tasks))

    written, answers = asyncio.run(main())
    assert written == BATCHES, f"{written} of {BATCHES} batches written while an fsync was held"
    for answer in answers:
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        offsets = [decode_offset_msg_id(i)[1] for i in answer.ext_fields["msgId"].split(",")]
        assert len(offsets) == PER_BATCH
        end = offsets[-1] + store.read_decoded(offsets[-1]).total_size
        assert store.flushed_offset >= end
    store.close()


def _count(store: MessageStore) -> int:
    """Batches whose records are in the log (a batch's messages are written together)."""
    written = sum(n for (topic, _), n in store.queue_offsets().items() if topic == "Batched")
    return written // PER_BATCH


def test_a_store_that_cannot_write_refuses_the_whole_batch(tmp_path: Path) -> None:
    for failpoint in ("append", "fsync"):
        plan = FaultPlan(failpoint, after=0, times=1, error=errno.EIO)
        store = open_store(
            tmp_path / failpoint, opener=FaultyOpener(plan), flush_policy=FlushPolicy.SYNC
        )
        answer = asyncio.run(_send_batch(store)(_batch_call(1)))
        assert answer.code == ResponseCode.SYSTEM_ERROR, (failpoint, answer.remark)
        assert "Input/output error" in (answer.remark or ""), answer.remark
        store.close()


def test_a_message_the_timer_refuses_refuses_its_whole_batch(tmp_path: Path) -> None:
    """The delivery-time bound is checked where the message is placed, after the message
    rules: the batch must still store nothing (a partly stored batch answered as refused
    would be stored again by the client's retry)."""
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC)
    too_late = str(int(time.time() * 1000) + 10 * 86_400_000)  # past delay_ms_max (1 day)
    answer = asyncio.run(_send_batch(store)(_batch_call(1, {2: {"TIMER_DELIVER_MS": too_late}})))
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL, answer.remark
    assert "message #2" in (answer.remark or "") and "delivery time" in (answer.remark or "")
    assert store.max_offset == 0
    store.close()


def test_send_batch_async_answers_what_send_batch_answers(tmp_path: Path) -> None:
    valid = [
        SendCommand(topic="t", body=b"ok", message_id="id-1", tag="A"),
        SendCommand(topic="t", body=b"ok too", message_id="id-3", message_group="g"),
        SendCommand(topic="t", body=b"ok", message_id="id-1", tag="A"),
    ]
    answered = []
    for name in ("threaded", "awaited"):
        store = open_store(tmp_path / name, flush_policy=FlushPolicy.SYNC)
        service = BrokerService(store, BrokerConfig(default_queue_count=4))
        if name == "threaded":
            outcomes = service.send_batch(valid)
        else:
            outcomes = asyncio.run(service.send_batch_async(valid))
        answered.append([(o.code, o.message_id, o.physical_offset, o.duplicate) for o in outcomes])
        assert outcomes[0].code is SendCode.OK and outcomes[2].duplicate
        service.begin_shutdown()
        refused = asyncio.run(service.send_batch_async(valid[:1]))
        assert [o.code for o in refused] == [SendCode.SHUTTING_DOWN]
        store.close()
    assert answered[0] == answered[1]


def test_send_batch_async_refuses_every_message_when_the_checks_refuse_one(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path, flush_policy=FlushPolicy.SYNC)
    service = BrokerService(store, BrokerConfig(default_queue_count=4))
    commands = [
        SendCommand(topic="t", body=b"ok", message_id="id-1"),
        SendCommand(topic="t", body=b"", message_id="id-2"),
        SendCommand(topic="t", body=b"ok", message_id="id-3"),
    ]
    outcomes = asyncio.run(service.send_batch_async(commands))
    assert [o.code for o in outcomes] == [SendCode.MESSAGE_BODY_EMPTY] * 3
    assert [o.message_id for o in outcomes] == ["id-1", "id-2", "id-3"]
    assert "message #1" in outcomes[0].reason and "message #1" in outcomes[2].reason
    assert store.max_offset == 0 and service.wait_idle(0)
    store.close()
