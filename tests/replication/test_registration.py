"""A master and its slave register with a real name server; ``mqadmin clusterList`` shows
the pair under one broker name, the slave with brokerId 1 (REMOTING_PROTOCOL.md 10.4)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from broker.broker_harness import BrokerProcess, wait_for
from replication_harness import free_port

from rmq_spark.envcheck import find_rocketmq_jars

sys.path.insert(0, str(Path(__file__).parent.parent / "remoting"))
from namesrv_harness import mqadmin, start_namesrv  # noqa: E402

pytestmark = pytest.mark.slow


def _remoting_address(broker: BrokerProcess) -> str:
    return "127.0.0.1:" + re.findall(r"remoting port (\d+) serves", broker.log_text())[0]


def test_slave_registers_with_broker_id_one_and_cluster_list_shows_the_pair(
    brokers: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    find_rocketmq_jars()
    namesrv = start_namesrv(tmp_path / "namesrv")
    try:
        ha = free_port()
        names = (f"broker.namesrv_addr={namesrv.addr}", "broker.broker_name=pair-a")
        master = brokers("master", *names, f"broker.ha_listen=127.0.0.1:{ha}")
        slave = brokers("slave", *names, "broker.role=SLAVE", f"broker.ha_master=127.0.0.1:{ha}")
        for broker in (master, slave):
            wait_for(lambda b=broker: "registered broker pair-a" in b.log_text(), 60, "register")
        rows = [line.split()[:4] for line in mqadmin(namesrv, "clusterList").splitlines()]
        assert ["DefaultCluster", "pair-a", "0", _remoting_address(master)] in rows
        assert ["DefaultCluster", "pair-a", "1", _remoting_address(slave)] in rows
    finally:
        namesrv.stop()
