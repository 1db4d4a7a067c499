"""PURE: the name-server calls a broker makes (REMOTING_PROTOCOL.md 3.1-3.3, 3.5).

``register_broker`` builds ``REGISTER_BROKER`` (103): the header as a 5.3.3 broker fills it and
the ``RegisterBrokerBody`` JSON (the topic table as ``topics.json`` writes it, through
``rocketmq_config.encode_topics``, the one owner of that JSON, plus an empty filter server
list), uncompressed, with its 31-bit CRC. ``unregister_broker`` builds ``UNREGISTER_BROKER``
(104). ``BrokerIdentity`` is what both name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rmq_spark.broker.config_files.rocketmq_config import (
    PERM_READ,
    PERM_WRITE,
    DataVersion,
    TopicConfig,
    encode_topics,
)
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.store.crc import crc32

__all__ = [
    "BrokerIdentity",
    "GET_BROKER_CLUSTER_INFO",
    "REGISTER_BROKER",
    "RESPONSE_SUCCESS",
    "UNREGISTER_BROKER",
    "register_broker",
    "registered_topics",
    "unregister_broker",
]

REGISTER_BROKER = 103
UNREGISTER_BROKER = 104
GET_BROKER_CLUSTER_INFO = 106
RESPONSE_SUCCESS = 0
MASTER_ID = 0  # MixAll.MASTER_ID: this broker is the master of its broker group
_PERM_INHERIT = 1
_SYSTEM_TOPIC_QUEUES = 16  # TopicConfig's default queue count


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """How the broker names itself to a name server: ``addr`` is ``host:port`` that clients
    dial; ``ha_addr`` is RocketMQ's HA address (there is no HA service: a placeholder)."""

    cluster_name: str
    broker_name: str
    addr: str
    ha_addr: str
    broker_id: int = MASTER_ID
    grpc_addr: str = ""  # "host:port" of the gRPC port, announced to the cluster (CLUSTER.md)

    def header(self) -> dict[str, str]:
        return {
            "brokerAddr": self.addr,
            "brokerId": str(self.broker_id),
            "brokerName": self.broker_name,
            "clusterName": self.cluster_name,
        }


def registered_topics(
    queue_counts: Mapping[str, int], identity: BrokerIdentity
) -> dict[str, TopicConfig]:
    """The topic table a RocketMQ broker registers: every topic with its queue count, plus the
    cluster- and broker-name topics its ``TopicConfigManager`` always holds (a 5.x name server
    refuses a first registration whose table has exactly one topic)."""
    system_perm = _PERM_INHERIT | PERM_READ | PERM_WRITE
    topics = {
        name: TopicConfig(name, _SYSTEM_TOPIC_QUEUES, _SYSTEM_TOPIC_QUEUES, perm=system_perm)
        for name in (identity.cluster_name, identity.broker_name)
    }
    topics.update((name, TopicConfig(name, count, count)) for name, count in queue_counts.items())
    return topics


def register_broker(
    identity: BrokerIdentity, topics: Mapping[str, TopicConfig], version: DataVersion
) -> RemotingCommand:
    """``REGISTER_BROKER`` for ``topics`` at data version ``version``."""
    wrapper = encode_topics(topics, version)
    # filterServerList carries the gRPC endpoint (cluster/route_data.py says why)
    announced = f'["grpc://{identity.grpc_addr}"]' if identity.grpc_addr else "[]"
    body = f'{{"filterServerList":{announced},"topicConfigSerializeWrapper":{wrapper}}}'.encode()
    header = {
        **identity.header(),
        "bodyCrc32": str(crc32(body) & 0x7FFFFFFF),
        "compressed": "false",
        "enableActingMaster": "false",
        "haServerAddr": identity.ha_addr,
    }
    return RemotingCommand(code=REGISTER_BROKER, ext_fields=header, body=body, language="PYTHON")


def unregister_broker(identity: BrokerIdentity) -> RemotingCommand:
    return RemotingCommand(code=UNREGISTER_BROKER, ext_fields=identity.header(), language="PYTHON")
