"""The broker's hooks for name-server registration: its command-line options and its start.

``rmq-spark broker --namesrv 'h:p;h:p' --broker-name B --cluster C`` sets ``broker.namesrv_addr``,
``broker.broker_name`` and ``broker.cluster_name``; ``start_registration`` starts a
``NamesrvRegistration`` for them (``None`` without name servers: nothing changes).

The address registered is where 4.x clients and tools reach the broker: the remoting port
(``broker.advertised_host`` or the listen host, and the bound remoting port; the gRPC port
when ``broker.remoting_listen`` is empty). The HA address is the broker's HA port when it
serves one (docs/REPLICATION.md), else RocketMQ's default, port + 1; a SLAVE registers with
its ``brokerId`` > 0, so routes and ``mqadmin clusterList`` show the pair.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping

from rmq_spark.broker.config import BrokerConfig, parse_namesrv_addr
from rmq_spark.broker.remoting.namesrv_api import BrokerIdentity
from rmq_spark.broker.remoting.namesrv_client import NamesrvRegistration

__all__ = ["DEFAULT_TOPIC", "add_namesrv_arguments", "namesrv_overrides", "start_registration"]

DEFAULT_TOPIC = "TBW102"  # TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC


def add_namesrv_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namesrv",
        metavar="'HOST:PORT;HOST:PORT'",
        help="RocketMQ name servers to register with (broker.namesrv_addr)",
    )
    parser.add_argument("--broker-name", metavar="NAME", help="broker name (broker.broker_name)")
    parser.add_argument("--cluster", metavar="NAME", help="cluster name (broker.cluster_name)")


def namesrv_overrides(args: argparse.Namespace) -> dict[str, str]:
    """The ``broker.*`` overrides the options above ask for."""
    pairs = (
        ("broker.namesrv_addr", getattr(args, "namesrv", None)),
        ("broker.broker_name", getattr(args, "broker_name", None)),
        ("broker.cluster_name", getattr(args, "cluster", None)),
    )
    return {key: value for key, value in pairs if value is not None}


def start_registration(
    config: BrokerConfig,
    port: int,
    topics: Callable[[], Mapping[str, int]],
    grpc_port: int | None = None,
    *,
    broker_id: int = 0,
    ha_port: int | None = None,
) -> NamesrvRegistration | None:
    """Register the broker serving on ``port`` with ``config.namesrv_addr``; ``None`` if empty.
    ``grpc_port``: announced to the other brokers, which route gRPC clients to it."""
    addresses = parse_namesrv_addr(config.namesrv_addr)
    if not addresses:
        return None
    host = config.route_host
    identity = BrokerIdentity(
        cluster_name=config.cluster_name,
        broker_name=config.broker_name,
        addr=f"{host}:{port}",
        ha_addr=f"{host}:{port + 1 if ha_port is None else ha_port}",
        broker_id=broker_id,
        grpc_addr=f"{host}:{grpc_port}" if grpc_port else "",
    )
    interval_s = config.register_interval_ms / 1000
    if config.auto_create_topics:
        topics = _with_default_topic(topics, config.default_queue_count)
    return NamesrvRegistration(addresses, identity, topics, interval_s=interval_s).start()


def _with_default_topic(
    topics: Callable[[], Mapping[str, int]], queue_count: int
) -> Callable[[], Mapping[str, int]]:
    """``topics`` plus RocketMQ's ``TBW102``: a 4.x producer whose topic has no route yet
    sends along TBW102's route, and the broker creates the topic on that first send (as a
    RocketMQ broker with ``autoCreateTopicEnable``)."""

    def with_default() -> Mapping[str, int]:
        return {DEFAULT_TOPIC: queue_count, **topics()}

    return with_default
