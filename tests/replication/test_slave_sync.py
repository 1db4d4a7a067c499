"""A slave copies its master's tables (RocketMQ's SlaveSynchronize: topics, consumer offsets,
delay offsets, subscription groups over remoting codes 21/43/45/201) and serves reads without
writing its log: remoting pulls from its store, pops refused; the master answers 43 and 45 to
super users only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from broker.broker_harness import BrokerProcess, read_records, wait_for
from replication_harness import free_port, remoting_call
from test_master_slave import segments, send_many

from rmq_spark.broker.config_files.rocketmq_config import (
    decode_consumer_offsets,
    decode_delay_offsets,
    decode_subscription_groups,
    decode_topics,
)
from rmq_spark.broker.config_files.rocketmq_config_files import write_delay_offsets
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.slow

USERS = """
[users.reader]
secret_key = "reader-secret-0123456789"
policies = [{ resource = "*", actions = ["Sub"] }]

[users.everything]
secret_key = "wildcard-secret-0123456789"
policies = [{ resource = "*", actions = ["All"] }]

[users.root]
secret_key = "root-secret-0123456789"
user_type = "Super"
"""
ROOT = ("root", "root-secret-0123456789")


def _config(store: Path, name: str) -> Any:
    """The file decoded by its codec (fastjson's form), ``None`` when it is not there yet."""
    path = store / "config" / name
    decode = {"consumerOffset.json": decode_consumer_offsets, "topics.json": decode_topics,
              "delayOffset.json": decode_delay_offsets,
              "subscriptionGroup.json": decode_subscription_groups}[name]  # fmt: skip
    return decode(path.read_text())[0] if path.exists() else None


def _pair(brokers: Callable[..., BrokerProcess], *master_extra: str, slave_extra: tuple = ()):
    ha, remoting, slave_remoting = free_port(), free_port(), free_port()
    master = brokers("master", f"broker.ha_listen=127.0.0.1:{ha}",
                     f"broker.remoting_listen=127.0.0.1:{remoting}", *master_extra)  # fmt: skip
    slave = brokers(
        "slave", "broker.role=SLAVE", f"broker.ha_master=127.0.0.1:{ha}",
        f"broker.ha_master_remoting=127.0.0.1:{remoting}", "broker.ha_config_sync_interval_ms=200",
        f"broker.remoting_listen=127.0.0.1:{slave_remoting}", *slave_extra,
    )  # fmt: skip
    return master, remoting, slave, slave_remoting


def test_slave_copies_the_masters_tables_and_serves_pulls_from_its_store(
    brokers: Callable[..., BrokerProcess], producer_for: Callable[..., Any], rocketmq: ModuleType
) -> None:
    master, remoting, slave, slave_remoting = _pair(brokers)
    send_many(rocketmq, producer_for(master.address, ("orders",)), 6)
    queue = read_records(master.store_dir)[0].queue_id
    committed = remoting_call(remoting, RequestCode.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": "billing", "topic": "orders", "queueId": str(queue), "commitOffset": "1",
    })  # fmt: skip
    assert committed.code == ResponseCode.SUCCESS, committed.remark
    group = json.dumps({"groupName": "billing", "retryMaxTimes": 3}).encode()
    made = remoting_call(remoting, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=group)
    assert made.code == ResponseCode.SUCCESS, made.remark
    write_delay_offsets(master.store_dir, {1: 7, 3: 2})  # as the schedule job leaves it

    def synced() -> bool:
        offsets = _config(slave.store_dir, "consumerOffset.json") or {}
        groups = _config(slave.store_dir, "subscriptionGroup.json") or {}
        return (
            offsets.get(("orders", "billing"), {}).get(queue) == 1
            and "billing" in groups
            and groups["billing"].retry_max_times == 3
            and _config(slave.store_dir, "delayOffset.json") == {1: 7, 3: 2}
        )

    wait_for(synced, 30, "the master's tables on the slave")
    wait_for(lambda: "orders" in (_config(slave.store_dir, "topics.json") or {}),
             10, "the topic on the slave")  # fmt: skip
    mine = len([r for r in read_records(master.store_dir) if r.queue_id == queue])
    pulled = remoting_call(slave_remoting, RequestCode.PULL_MESSAGE, {
        "consumerGroup": "billing", "topic": "orders", "queueId": str(queue), "queueOffset": "0",
        "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "subscription": "*",
        "expressionType": "TAG", "subVersion": "0",
    })  # fmt: skip
    assert pulled.code == ResponseCode.SUCCESS, pulled.remark
    assert pulled.ext_fields["nextBeginOffset"] == str(mine)
    assert pulled.ext_fields["suggestWhichBrokerId"] == "0"


def test_pops_on_a_slave_are_refused_and_its_log_stays_the_masters(
    brokers: Callable[..., BrokerProcess], producer_for: Callable[..., Any], rocketmq: ModuleType
) -> None:
    master, _, slave, _ = _pair(brokers)
    send_many(rocketmq, producer_for(master.address, ("orders",)), 3)
    wait_for(lambda: len(read_records(slave.store_dir)) == 3, 20, "the slave's copy")
    wait_for(lambda: slave.log_text().count("config sync from") >= 1, 20, "a config sync")
    config = rocketmq.ClientConfiguration(slave.address, rocketmq.Credentials(), request_timeout=5)
    subscription = {"orders": rocketmq.FilterExpression("*")}
    consumer = rocketmq.SimpleConsumer(config, "billing", subscription, await_duration=5)
    consumer.startup()
    try:
        with pytest.raises(Exception, match="SLAVE"):
            consumer.receive(4, 15)
    finally:
        consumer.shutdown()
    assert master.stop() == 0
    assert slave.stop() == 0
    assert segments(slave.store_dir) == segments(master.store_dir)


def test_the_master_answers_offsets_to_super_users_only_and_a_slave_signs_as_one(
    tmp_path: Path, brokers: Callable[..., BrokerProcess]
) -> None:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    auth = ("broker.auth_enabled=true", f"broker.auth_users_file={users}")
    master, remoting, slave, _ = _pair(
        brokers, *auth, slave_extra=(f"broker.auth_users_file={users}", "broker.ha_sync_user=root")
    )
    for code in (RequestCode.GET_ALL_CONSUMER_OFFSET, RequestCode.GET_ALL_DELAY_OFFSET):
        answer = remoting_call(remoting, code, user=ROOT)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert "offsetTable" in json.loads(answer.body)
        for who in (None, ("everything", "wildcard-secret-0123456789"),
                    ("reader", "reader-secret-0123456789")):  # fmt: skip
            refused = remoting_call(remoting, code, user=who)
            assert refused.code == ResponseCode.NO_PERMISSION, (who, refused.remark)
    ha = remoting_call(remoting, RequestCode.EXCHANGE_BROKER_HA_INFO, user=ROOT)  # a 5.x slave's
    assert ha.code == ResponseCode.SUCCESS and ha.ext_fields["masterHaAddress"] in master.log_text()
    wildcard = ("everything", "wildcard-secret-0123456789")
    denied = remoting_call(remoting, RequestCode.EXCHANGE_BROKER_HA_INFO, user=wildcard)
    assert denied.code == ResponseCode.NO_PERMISSION
    wait_for(lambda: "config sync from" in slave.log_text(), 20, "the signed sync")
    assert "failed" not in slave.log_text()


def test_a_puller_far_behind_is_told_to_read_the_slave_only_with_slave_read() -> None:
    from rmq_spark.broker.replication.slave_read import suggest_broker_id

    record = bytearray(64)
    record[28:36] = (1000).to_bytes(8, "big")  # PHYSICALOFFSET
    assert suggest_broker_id(True, [bytes(record)], 1000 + 501, 500) == 1
    assert suggest_broker_id(True, [bytes(record)], 1000 + 499, 500) == 0
    assert suggest_broker_id(False, [bytes(record)], 10**12, 500) == 0
    assert suggest_broker_id(True, [], 10**12, 500) == 0


def test_a_slave_signing_as_a_non_super_user_does_not_start(
    tmp_path: Path, brokers: Callable[..., BrokerProcess]
) -> None:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    with pytest.raises(AssertionError, match="not a super user"):
        brokers("slave", "broker.role=SLAVE", f"broker.ha_master=127.0.0.1:{free_port()}",
                f"broker.auth_users_file={users}", "broker.ha_sync_user=everything")  # fmt: skip
