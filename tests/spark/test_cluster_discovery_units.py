"""What a discovered store path must be before the source reads it (no Spark, no broker):
a name server is unauthenticated, so whoever registers a broker names a path."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from rmq_spark.broker.cluster.broker_table import BrokerTableError, brokers_of, master_or_lowest
from rmq_spark.errors import SourceError
from rmq_spark.spark.cluster_discovery import check_readable_here, check_store
from rmq_spark.spark.options import parse_options


def _store(root: Path) -> Path:
    (root / "commitlog").mkdir(parents=True)
    (root / "checkpoint").write_bytes(bytes(4096))
    return root


def test_a_store_is_read_and_anything_else_refused(tmp_path: Path) -> None:
    store = _store(tmp_path / "stores" / "a")
    assert check_store("a", "h:1", str(store), ()) == str(store.resolve())
    for path, why in (
        ("relative/dir", "is not an absolute path"),
        ("/etc", "has no readable commitlog/ directory"),
        (str(tmp_path / "missing"), "has no readable commitlog/ directory"),
    ):
        with pytest.raises(SourceError, match=f"broker a \\(h:1\\) reports store .*{why}"):
            check_store("a", "h:1", path, ())
    (store / "checkpoint").unlink()
    with pytest.raises(SourceError, match="has no readable checkpoint file"):
        check_store("a", "h:1", str(store), ())


def test_store_roots_bound_where_stores_may_be(tmp_path: Path) -> None:
    store = _store(tmp_path / "stores" / "a")
    outside = _store(tmp_path / "storesX" / "b")  # a prefix of the name is not "under"
    roots = (str(tmp_path / "stores"),)
    assert check_store("a", "h:1", str(store), roots) == str(store.resolve())
    with pytest.raises(SourceError, match="is not under storeRoots"):
        check_store("b", "h:2", str(outside), roots)
    link = tmp_path / "stores" / "link"
    link.symlink_to(outside)  # a link under a root to a store outside it
    with pytest.raises(SourceError, match="is not under storeRoots"):
        check_store("b", "h:2", str(link), roots)


def test_an_executor_without_the_store_says_which_path_and_host(tmp_path: Path) -> None:
    check_readable_here("a", str(_store(tmp_path / "a")))
    missing = str(tmp_path / "gone")
    with pytest.raises(SourceError, match=f"store {missing} of broker b is not readable on host "):
        check_readable_here("b", missing)
    with pytest.raises(SourceError, match=socket.gethostname()):
        check_readable_here("b", missing)


def test_the_cluster_table_gives_each_brokers_master() -> None:
    table = {
        "brokerAddrTable": {
            "b1": {"brokerAddrs": {"0": "h:1", "1": "h:2"}},
            "b2": {"brokerAddrs": {"2": "h:4", "1": "h:3"}},  # no master: the lowest id
            "b3": {"brokerAddrs": {"0": "h:5"}},
        },
        "clusterAddrTable": {"C1": ["b1", "b2"], "C2": ["b3"]},
    }

    def masters(cluster: str) -> dict[str, str]:
        return {n: master_or_lowest(ids) for n, ids in brokers_of(table, cluster, "ns").items()}

    assert masters("") == {"b1": "h:1", "b2": "h:3", "b3": "h:5"}
    assert masters("C2") == {"b3": "h:5"}
    with pytest.raises(BrokerTableError, match="cluster='C9': name server ns lists C1, C2"):
        masters("C9")
    assert brokers_of({"brokerAddrTable": {}, "clusterAddrTable": {}}, "", "ns") == {}


def test_a_rogue_registration_is_refused_by_name() -> None:
    for entry, why in (
        ({"../x": {"brokerAddrs": {"0": "h:1"}}}, "lists broker '../x' without an address"),
        ({"b": {"brokerAddrs": {}}}, "lists broker 'b' without an address"),
        ({"b": {"brokerAddrs": {"zero": "h:1"}}}, "lists broker 'b' with id 'zero'"),
        ({"b": {"brokerAddrs": {"0": "h:1/x"}}}, "lists broker 'b' at 'h:1/x'"),
    ):
        with pytest.raises(BrokerTableError, match=re.escape(why)):
            brokers_of({"brokerAddrTable": entry}, "", "ns")


def test_cluster_options_go_with_namesrv_only() -> None:
    with pytest.raises(SourceError, match="option cluster goes with the option namesrv"):
        parse_options({"path": "/s", "cluster": "C"}, streaming=False)
    with pytest.raises(
        SourceError, match=r"option storeRoots='rel' is invalid \(each must be an absolute path\)"
    ):
        parse_options({"namesrv": "h:1", "storeRoots": "rel"}, streaming=False)
    parsed = parse_options({"namesrv": "h:1;g:2", "storeRoots": "/a, /b"}, streaming=False)
    assert (parsed.namesrv, parsed.store_roots, parsed.path) == ("h:1;g:2", ("/a", "/b"), "")
