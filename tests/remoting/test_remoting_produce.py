"""SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE against a real broker process, spoken
frame by frame as the 4.x Java client writes them (REMOTING_PROTOCOL.md 4.1, 4.2), each
result checked in the store's CommitLog."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import pytest
from broker.broker_harness import BrokerProcess, by_uniq_key, props, read_records, wait_for
from remoting_harness import FrameClient, batch_body, start_remoting_broker

from rmq_spark.broker.remoting.codec import FLAG_ONEWAY, RemotingCommand, SerializeType
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.store.msg_id import decode_offset_msg_id
from rmq_spark.store.properties import encode_properties

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    root = tmp_path_factory.mktemp("produce")
    broker, port = start_remoting_broker(root / "store", root / "work")
    yield broker, port
    assert broker.stop() == 0


@pytest.fixture
def client(served) -> Iterator[FrameClient]:
    connection = FrameClient(served[1])
    yield connection
    connection.close()


def _v2(topic: str, properties: dict[str, str], queue_id: int = 0, sys_flag: int = 0) -> dict:
    """A 4.9.8 client's SendMessageRequestHeaderV2 (short keys a..n)."""
    return {
        "a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": str(sys_flag),
        "g": "1700000000000", "h": "0", "i": encode_properties(properties), "j": "0",
        "k": "false", "m": "false", "n": "broker-a",
    }  # fmt: skip


def _send(client: FrameClient, opaque: int, fields: dict, body: bytes, code: int = 310):
    return client.call(
        RemotingCommand(code=code, opaque=opaque, version=409, ext_fields=fields, body=body)
    )


def _stored(served, uniq: str, count: int = 1) -> list:
    broker, _ = served
    return wait_for(
        lambda: (
            (found := by_uniq_key(read_records(broker.store_dir)).get(uniq, []))
            and len(found) >= count
            and found
        ),
        10,
        f"{uniq} in the store",
    )


def test_send_v2_is_stored_and_answered_like_a_rocketmq_broker(served, client) -> None:
    properties = {"UNIQ_KEY": "AC11000100002A9F0000000000000001", "TAGS": "TagA",
                  "KEYS": "k1 k2", "WAIT": "true", "color": "red"}  # fmt: skip
    answer = _send(client, 11, _v2("Orders", properties, queue_id=3), b"hello")
    assert (answer.code, answer.opaque, answer.is_response) == (ResponseCode.SUCCESS, 11, True)
    fields = answer.ext_fields or {}
    assert fields["queueId"] == "3" and fields["queueOffset"] == "0"
    assert fields["transactionId"] == properties["UNIQ_KEY"]
    assert (fields["MSG_REGION"], fields["TRACE_ON"]) == ("DefaultRegion", "true")
    [record] = _stored(served, properties["UNIQ_KEY"])
    assert (record.topic, record.queue_id, record.queue_offset, record.body) == (
        "Orders", 3, 0, b"hello",
    )  # fmt: skip
    stored = props(record)
    assert stored["TAGS"] == "TagA" and stored["KEYS"] == "k1 k2" and stored["color"] == "red"
    assert "WAIT" not in stored
    assert decode_offset_msg_id(fields["msgId"])[1] == record.physical_offset


def test_send_v1_names_and_a_retry_of_the_same_uniq_key_store_once(served, client) -> None:
    uniq = "AC11000100002A9F0000000000000002"
    fields = {"producerGroup": "pg", "topic": "V1Topic", "defaultTopic": "TBW102",
              "defaultTopicQueueNums": "4", "queueId": "1", "sysFlag": "0",
              "bornTimestamp": "1700000000000", "flag": "0",
              "properties": encode_properties({"UNIQ_KEY": uniq})}  # fmt: skip
    first = _send(client, 1, fields, b"once", code=RequestCode.SEND_MESSAGE)
    again = _send(client, 2, fields, b"once", code=RequestCode.SEND_MESSAGE)
    assert first.code == again.code == ResponseCode.SUCCESS
    assert (first.ext_fields or {})["queueOffset"] == (again.ext_fields or {})["queueOffset"]
    assert len(_stored(served, uniq)) == 1


def test_a_compressed_body_is_stored_inflated(served, client) -> None:
    uniq = "AC11000100002A9F0000000000000003"
    body = b"x" * 10_000
    answer = _send(client, 3, _v2("Zipped", {"UNIQ_KEY": uniq}, sys_flag=1), zlib.compress(body))
    assert answer.code == ResponseCode.SUCCESS
    [record] = _stored(served, uniq)
    assert record.body == body and not record.sys_flag & 1


def test_a_body_that_inflates_past_the_limit_is_refused(served, client) -> None:
    bomb = zlib.compress(b"\0" * (5 << 20))
    answer = _send(client, 4, _v2("Zipped", {"UNIQ_KEY": "BOMB"}, sys_flag=1), bomb)
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL and "past the limit" in (answer.remark or "")


def test_a_batch_is_stored_in_one_queue_with_consecutive_offsets(served, client) -> None:
    uniqs = [f"AC11000100002A9F00000000000001{i:02d}" for i in range(3)]
    body = batch_body([(f"m{i}".encode(), {"UNIQ_KEY": u, "WAIT": "true"})
                        for i, u in enumerate(uniqs)])  # fmt: skip
    fields = {**_v2("Batched", {"WAIT": "true"}, queue_id=2), "m": "true"}
    answer = _send(client, 5, fields, body, code=RequestCode.SEND_BATCH_MESSAGE)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    ids = (answer.ext_fields or {})["msgId"].split(",")
    records = [_stored(served, u)[0] for u in uniqs]
    assert [r.queue_offset for r in records] == [0, 1, 2]
    assert {r.queue_id for r in records} == {2}
    assert [decode_offset_msg_id(i)[1] for i in ids] == [r.physical_offset for r in records]


def test_a_batch_with_one_bad_message_stores_nothing(served, client) -> None:
    body = batch_body([(b"ok", {"UNIQ_KEY": "GOOD-IN-BAD-BATCH"}),
                        (b"bad", {"UNIQ_KEY": "BAD-IN-BAD-BATCH", "MSG_REGION": "x"})])  # fmt: skip
    fields = {**_v2("Batched", {}), "m": "true"}
    answer = _send(client, 6, fields, body, code=RequestCode.SEND_BATCH_MESSAGE)
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL
    broker, _ = served
    assert "GOOD-IN-BAD-BATCH" not in by_uniq_key(read_records(broker.store_dir))


@pytest.mark.parametrize(
    ("why", "fields", "body", "code"),
    [
        ("queue past the topic", _v2("Orders", {"UNIQ_KEY": "Q99"}, queue_id=99), b"x",
         ResponseCode.INVALID_PARAMETER),
        ("empty body", _v2("Orders", {"UNIQ_KEY": "EMPTY"}), b"", ResponseCode.MESSAGE_ILLEGAL),
        ("delayed transaction", _v2("Orders", {"UNIQ_KEY": "TX", "TRAN_MSG": "true", "DELAY": "3"}),
         b"x", ResponseCode.MESSAGE_ILLEGAL),
        ("bad topic", _v2("bad topic!", {"UNIQ_KEY": "BADT"}), b"x",
         ResponseCode.INVALID_PARAMETER),
        ("delay level past the table", _v2("Orders", {"UNIQ_KEY": "D99", "DELAY": "99"}), b"x",
         ResponseCode.INVALID_PARAMETER),
        ("no topic", {"a": "pg"}, b"x", ResponseCode.SYSTEM_ERROR),
        ("queueId not a number", {**_v2("Orders", {}), "e": "zz"}, b"x",
         ResponseCode.SYSTEM_ERROR),
    ],
)  # fmt: skip
def test_a_refused_send_stores_nothing(served, client, why, fields, body, code) -> None:
    answer = _send(client, 7, fields, body)
    assert answer.code == code, (why, answer.remark)
    assert answer.remark
    broker, _ = served
    uniq = fields.get("i", "")
    stored = by_uniq_key(read_records(broker.store_dir))
    assert not any(key and key in uniq for key in stored if key.startswith(("Q99", "TX", "D99")))
    assert broker.proc.poll() is None


def test_a_delay_level_goes_to_the_schedule_topic(served, client) -> None:
    answer = _send(client, 8, _v2("Orders", {"UNIQ_KEY": "DELAY3", "DELAY": "3"}), b"later")
    assert answer.code == ResponseCode.SUCCESS
    [record] = _stored(served, "DELAY3")
    assert record.topic == "SCHEDULE_TOPIC_XXXX" and record.queue_id == 2
    assert props(record)["REAL_TOPIC"] == "Orders"


def test_oneway_and_rocketmq_binary_sends_are_stored(served, client) -> None:
    fields = _v2("Orders", {"UNIQ_KEY": "ONEWAY-1"})
    client.send(RemotingCommand(code=310, opaque=9, flag=FLAG_ONEWAY, ext_fields=fields,
                                body=b"fire"))  # fmt: skip
    _stored(served, "ONEWAY-1")
    answer = client.call(
        RemotingCommand(code=310, opaque=10, ext_fields=_v2("Orders", {"UNIQ_KEY": "BIN-1"}),
                        body=b"bin"),
        SerializeType.ROCKETMQ,
    )  # fmt: skip
    assert answer.opaque == 10 and answer.code == ResponseCode.SUCCESS
    _stored(served, "BIN-1")


def test_remoting_requests_are_timed_under_rocketmqs_rpc_latency(tmp_path) -> None:
    """Each answered request counts into ``rocketmq_rpc_latency`` with protocol ``remoting``,
    its request code and its answer's code, as the gRPC calls do."""
    import urllib.request

    from namesrv_harness import free_port
    from prometheus_client.parser import text_string_to_metric_families

    metrics = free_port()
    broker, port = start_remoting_broker(
        tmp_path / "store", tmp_path / "work", f"broker.metrics_listen=127.0.0.1:{metrics}"
    )
    try:
        client = FrameClient(port)
        for opaque in range(3):
            answer = _send(client, opaque, _v2("Timed", {"UNIQ_KEY": f"U{opaque}"}), b"x")
            assert answer.code == ResponseCode.SUCCESS
        assert client.call(RemotingCommand(code=9999, opaque=9)).code == (
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        )
        client.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as page:
            text = page.read().decode("utf-8")
    finally:
        assert broker.stop() == 0
    counts = {
        (sample.labels["request_code"], sample.labels["response_code"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "rocketmq_rpc_latency_count"
        and sample.labels["protocol_type"] == "remoting"
    }
    assert counts == {("SEND_MESSAGE_V2", "SUCCESS"): 3, ("9999", "REQUEST_CODE_NOT_SUPPORTED"): 1}
