"""What the remoting front answers for replication outcomes (RocketMQ's codes, REMOTING_PROTOCOL
4.1 and 10.3), and what a peer on the HA port can and cannot do, spoken byte by byte."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from broker.broker_harness import BrokerProcess, wait_for
from replication_harness import free_port, remoting_call

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.replication.wire import HEADER, REPORT
from rmq_spark.store.properties import encode_properties

sys.path.insert(0, str(Path(__file__).parent.parent / "remoting"))
from remoting_harness import FrameClient, batch_body  # noqa: E402


def _send(port: int, uniq: str, *batched: str) -> RemotingCommand:
    """SEND_MESSAGE_V2 of one message ``uniq``; with ``batched`` UNIQ_KEYs, SEND_BATCH_MESSAGE
    of ``uniq`` and those."""
    fields = {"a": "pg", "b": "Orders", "c": "TBW102", "d": "4", "e": "0", "f": "0",
              "g": "1700000000000", "h": "0", "i": encode_properties({"UNIQ_KEY": uniq}),
              "j": "0", "k": "false", "m": "false", "n": "broker-a"}  # fmt: skip
    code, body = 310, b"hi"
    if batched:
        messages = [(b"hi", {"UNIQ_KEY": key}) for key in (uniq, *batched)]
        code, body, fields["i"] = RequestCode.SEND_BATCH_MESSAGE, batch_body(messages), ""
    client = FrameClient(port)
    try:
        return client.call(
            RemotingCommand(code=code, opaque=1, version=409, ext_fields=fields, body=body)
        )
    finally:
        client.close()


def _remoting(brokers: Callable[..., BrokerProcess], name: str, *settings: str):
    port = free_port()
    return brokers(name, f"broker.remoting_listen=127.0.0.1:{port}", *settings), port


def test_sync_master_codes_no_slave_stalled_slave_and_a_slave_refusing(
    brokers: Callable[..., BrokerProcess],
) -> None:
    ha = free_port()
    master, port = _remoting(
        brokers, "master", "broker.role=SYNC_MASTER", f"broker.ha_listen=127.0.0.1:{ha}",
        "broker.ha_slave_timeout_ms=300",
    )  # fmt: skip
    alone = _send(port, "AC11000100002A9F0000000000000001")
    assert alone.code == ResponseCode.SLAVE_NOT_AVAILABLE  # stored, with its position
    assert (alone.ext_fields or {})["queueOffset"] == "0"
    batch = _send(port, "AC11000100002A9F0000000000000011", "AC11000100002A9F0000000000000012")
    assert batch.code == ResponseCode.SLAVE_NOT_AVAILABLE, batch.remark  # a batch: the same
    assert (batch.ext_fields or {})["queueOffset"] == "1"
    assert len((batch.ext_fields or {})["msgId"].split(",")) == 2
    with socket.create_connection(("127.0.0.1", ha)) as stalled:  # reports once, then nothing
        stalled.sendall(REPORT.pack(0))
        wait_for(lambda: "slave 127.0.0.1" in master.log_text(), 10, "the stalled slave")
        late = _send(port, "AC11000100002A9F0000000000000002")
        assert late.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        assert (late.ext_fields or {})["queueOffset"] == "3"
        # ... and a report past what it was sent acknowledges nothing it was not sent
        stalled.sendall(REPORT.pack(1 << 40))
        time.sleep(0.3)  # read by the master before the next send is written
        assert _send(port, "AC11000100002A9F0000000000000003").code != ResponseCode.SUCCESS
    slave, slave_port = _remoting(
        brokers, "slave", "broker.role=SLAVE", f"broker.ha_master=127.0.0.1:{ha}"
    )
    wait_for(lambda: master.log_text().count("slave 127.0.0.1") >= 2, 10, "the slave")
    refused = _send(slave_port, "AC11000100002A9F0000000000000004")
    assert refused.code == ResponseCode.SYSTEM_BUSY
    assert "[REJECTREQUEST]" in (refused.remark or "")
    assert _send(port, "AC11000100002A9F0000000000000005").code == ResponseCode.SUCCESS
    confirmed = _send(port, "AC11000100002A9F0000000000000021", "AC11000100002A9F0000000000000022")
    assert confirmed.code == ResponseCode.SUCCESS, confirmed.remark  # the slave has it
    on_slave = _send(
        slave_port, "AC11000100002A9F0000000000000031", "AC11000100002A9F0000000000000032"
    )
    assert on_slave.code == ResponseCode.SYSTEM_BUSY, on_slave.remark


def test_a_peer_ahead_of_the_master_is_refused_and_the_log_is_served_from_its_start(
    brokers: Callable[..., BrokerProcess],
) -> None:
    ha = free_port()
    master, port = _remoting(brokers, "master", f"broker.ha_listen=127.0.0.1:{ha}")
    assert _send(port, "AC11000100002A9F0000000000000001").code == ResponseCode.SUCCESS
    with socket.create_connection(("127.0.0.1", ha), timeout=10) as ahead:
        ahead.sendall(REPORT.pack(1 << 30))
        offset, size = HEADER.unpack(ahead.recv(12))
        assert size == 0 and offset < 1 << 30  # where the master's log ends; then closed
        assert ahead.recv(1) == b""
    assert "past this master's log end" in master.log_text()
    # Anyone reaching the HA port reads the whole log (RocketMQ's protocol has no auth):
    with socket.create_connection(("127.0.0.1", ha), timeout=10) as reader:
        reader.sendall(REPORT.pack(0))
        offset, size = HEADER.unpack(reader.recv(12))
        assert offset == 0 and size > 0


def test_the_ha_port_is_loopback_unless_allowed_auto_only_on_a_sync_master_without_auth() -> None:
    import pytest

    with pytest.raises(ValueError, match="ha_listen: 0.0.0.0:10912 is not loopback"):
        BrokerConfig(ha_listen="0.0.0.0:10912")
    BrokerConfig(ha_listen="0.0.0.0:10912", ha_allow_remote=True)
    with pytest.raises(ValueError, match="ha_master: a SLAVE needs"):
        BrokerConfig(role="SLAVE")
    with pytest.raises(ValueError, match="role: must be one of"):
        BrokerConfig(role="MASTER")
    with pytest.raises(ValueError, match="ha_listen: a SYNC_MASTER needs"):
        BrokerConfig(role="SYNC_MASTER", ha_listen="")
    from rmq_spark.broker.replication.node import ha_bind

    assert ha_bind(BrokerConfig(), 8081) is None  # the default ASYNC_MASTER opens no HA port
    assert ha_bind(BrokerConfig(role="SYNC_MASTER"), 8081) == ("127.0.0.1", 8082, True)
    assert ha_bind(BrokerConfig(ha_listen="127.0.0.1:9000"), 8081) == ("127.0.0.1", 9000, False)
    authed = BrokerConfig(role="SYNC_MASTER", auth_enabled=True, auth_users_file="users.toml")
    assert ha_bind(authed, 8081) is None


def _port_pair() -> int:
    """A free port P with P - 2 free too."""
    for _ in range(200):
        port = free_port()
        try:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port - 2))
        except OSError:
            continue
        return port
    raise AssertionError("no free port pair")


def test_a_master_serves_remoting_on_rocketmqs_vip_channel_too(
    brokers: Callable[..., BrokerProcess],
) -> None:
    """A RocketMQ slave syncs its master's tables on the VIP channel (remoting port - 2,
    ``MixAll.brokerVIPChannel``): a master with an HA port answers there; a SLAVE does not
    open one."""
    port = _port_pair()
    brokers("master", f"broker.remoting_listen=127.0.0.1:{port}", "broker.role=SYNC_MASTER",
            f"broker.ha_listen=127.0.0.1:{free_port()}")  # fmt: skip
    answer = remoting_call(port - 2, RequestCode.GET_ALL_TOPIC_CONFIG)
    assert answer.code == ResponseCode.SUCCESS and b"topicConfigTable" in answer.body
    slave_port = _port_pair()
    brokers("slave", f"broker.remoting_listen=127.0.0.1:{slave_port}", "broker.role=SLAVE",
            f"broker.ha_master=127.0.0.1:{free_port()}")  # fmt: skip
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", slave_port - 2))  # nobody listens there
