"""RocketMQ 5.3.3's ``mqadmin`` (``rmq-spark mqadmin``) against a broker registered with a real
name server: clusterList, brokerStatus, updateTopic, updateSubGroup, topicStatus,
queryMsgByKey and queryMsgById, each output checked against what the broker holds."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from broker.broker_harness import BrokerProcess, by_uniq_key, read_records, wait_for
from namesrv_harness import Namesrv, mqadmin
from remoting_harness import FrameClient, start_remoting_broker

from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.store.properties import encode_properties

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(
    namesrv: Namesrv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, int]]:
    root = tmp_path_factory.mktemp("admin")
    broker, port = start_remoting_broker(
        root / "store", root / "work", f"broker.namesrv_addr={namesrv.addr}",
        "broker.broker_name=admin-b", "broker.topics=Stats:2",
    )  # fmt: skip
    try:
        wait_for(lambda: "registered broker admin-b" in broker.log_text(), 60, "registration")
        _send_five(port)
    except BaseException:
        broker.kill()  # a fixture that fails before its yield is not torn down
        raise
    yield broker, port
    assert broker.stop() == 0


def _send_five(port: int) -> None:
    client = FrameClient(port)
    try:
        for i in range(5):
            properties = encode_properties({"UNIQ_KEY": f"ADMIN-{i}", "KEYS": f"order-{i}"})
            fields = {"a": "pg", "b": "Stats", "c": "TBW102", "d": "4", "e": str(i % 2),
                      "f": "0", "g": "0", "h": "0", "i": properties}  # fmt: skip
            answer = client.call(RemotingCommand(code=310, opaque=i, ext_fields=fields,
                                                 body=f"stats-{i}".encode()))  # fmt: skip
            assert answer.code == ResponseCode.SUCCESS
    finally:
        client.close()


def test_cluster_list_and_broker_status_read_the_brokers_runtime_info(served, namesrv) -> None:
    broker, port = served
    rows = [line.split() for line in mqadmin(namesrv, "clusterList").splitlines()]
    assert ["DefaultCluster", "admin-b", "0", f"127.0.0.1:{port}"] in [r[:4] for r in rows]
    status = mqadmin(namesrv, "brokerStatus", "-b", f"127.0.0.1:{port}")
    values = dict(re.findall(r"^(\S+)\s*:\s*(.*?)\s*$", status, re.MULTILINE))
    assert values["brokerVersionDesc"] == "V5_3_3"
    assert int(values["msgPutTotalTodayNow"]) == 5
    assert int(values["commitLogMaxOffset"]) > 0


def test_topic_status_lists_each_queues_offsets(served, namesrv) -> None:
    out = mqadmin(namesrv, "topicStatus", "-t", "Stats")
    rows = [line.split() for line in out.splitlines() if line.startswith("admin-b")]
    assert [(r[1], r[2], r[3]) for r in rows] == [("0", "0", "3"), ("1", "0", "2")]


def test_update_topic_creates_it_on_the_broker(served, namesrv) -> None:
    _, port = served
    out = mqadmin(namesrv, "updateTopic", "-b", f"127.0.0.1:{port}", "-t", "Made", "-r", "3",
                  "-w", "3")  # fmt: skip
    assert "success" in out.lower()
    client = FrameClient(port)
    try:
        answer = client.call(RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG, opaque=1))
    finally:
        client.close()
    table = json.loads(answer.body)["topicConfigTable"]
    assert table["Made"]["readQueueNums"] == 3 and table["Stats"]["writeQueueNums"] == 2
    wait_for(lambda: "Made" in mqadmin(namesrv, "topicList"), 30, "Made at the name server")


def test_query_by_key_and_by_offset_id_find_the_stored_record(served, namesrv) -> None:
    broker, _ = served
    out = mqadmin(namesrv, "queryMsgByKey", "-t", "Stats", "-k", "order-3")
    assert "ADMIN-3" in out and "ADMIN-2" not in out
    [record] = by_uniq_key(read_records(broker.store_dir))["ADMIN-3"]
    by_id = mqadmin(namesrv, "queryMsgById", "-t", "Stats", "-i", _offset_id(broker, record))
    assert "ADMIN-3" in by_id and "order-3" in by_id


def _offset_id(broker: BrokerProcess, record) -> str:
    from rmq_spark.store.msg_id import offset_msg_id

    return offset_msg_id(record.store_host, record.physical_offset)


def test_query_by_an_unknown_key_is_query_not_found(served) -> None:
    _, port = served
    client = FrameClient(port)
    try:
        fields = {"topic": "Stats", "key": "no-such-key", "maxNum": "64",
                  "beginTimestamp": "0", "endTimestamp": str(2**63 - 1)}  # fmt: skip
        answer = client.call(RemotingCommand(code=RequestCode.QUERY_MESSAGE, opaque=1,
                                             ext_fields=fields))  # fmt: skip
    finally:
        client.close()
    assert answer.code == ResponseCode.QUERY_NOT_FOUND


def test_update_sub_group_sets_the_groups_settings_the_consumers_use(served, namesrv) -> None:
    broker, port = served
    out = mqadmin(namesrv, "updateSubGroup", "-b", f"127.0.0.1:{port}", "-g", "billing",
                  "-r", "3", "-o", "true")  # fmt: skip
    assert "success" in out.lower(), out
    written = json.loads((broker.store_dir / "config" / "subscriptionGroup.json").read_text())
    entry = written["subscriptionGroupTable"]["billing"]
    assert (entry["retryMaxTimes"], entry["consumeMessageOrderly"]) == (3, True)
    client = FrameClient(port)
    try:
        every = client.call(
            RemotingCommand(code=RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, opaque=1)
        )
        one = client.call(RemotingCommand(code=RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG,
                                          opaque=2, ext_fields={"group": "billing"}))  # fmt: skip
        nobody = {"group": "nobody"}
        missing = client.call(RemotingCommand(code=RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG,
                                              opaque=3, ext_fields=nobody))  # fmt: skip
        bad = [
            client.call(
                RemotingCommand(
                    code=RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, opaque=4 + i, body=body
                )
            )  # fmt: skip
            for i, body in enumerate(
                [
                    b"{",
                    b'{"groupName": "../x"}',
                    b'{"groupName": "%RETRY%g"}',
                    b'{"groupName": "g", "retryMaxTimes": -1}',
                ]
            )  # fmt: skip
        ]
    finally:
        client.close()
    assert json.loads(every.body)["subscriptionGroupTable"]["billing"]["retryMaxTimes"] == 3
    assert json.loads(one.body)["consumeMessageOrderly"] is True
    assert missing.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    assert [answer.code for answer in bad] == [ResponseCode.INVALID_PARAMETER] * 4
    assert set(json.loads(every.body)["subscriptionGroupTable"]) == {"billing"}
