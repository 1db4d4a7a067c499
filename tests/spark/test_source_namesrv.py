"""Spark over a cluster discovered through RocketMQ's name server (``option("namesrv")``):
a real ``rmq-spark namesrv`` and ``rmq-spark broker`` processes registered with it, each with
its own store. One query reads every broker's store once, tagged with ``broker_name``; a
stream keeps offsets per broker across restarts, reads a broker that joined from its earliest
offset and keeps the offset of one that left; a bad name server fails at ``load()``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker.broker_harness import BrokerProcess, read_records, start_broker, wait_for
from remoting.namesrv_harness import Namesrv, free_port, start_namesrv

from rmq_spark.broker.producer import Producer
from rmq_spark.errors import SourceError
from rmq_spark.spark.cluster_discovery import discover
from rmq_spark.spark.options import parse_options

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CLUSTER = "SparkCluster"


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Namesrv]:
    started = start_namesrv(tmp_path_factory.mktemp("namesrv") / "work")
    yield started
    started.stop()


def _broker(namesrv: Namesrv, root: Path, name: str, topic: str) -> BrokerProcess:
    broker = start_broker(
        root / name, root / f"{name}-work", f"broker.topics={topic}:2",
        "broker.auto_create_topics=false", f"broker.namesrv_addr={namesrv.addr}",
        f"broker.broker_name={name}", f"broker.cluster_name={CLUSTER}",
    )  # fmt: skip
    return broker


def _send(broker: BrokerProcess, topic: str, bodies: list[str]) -> None:
    with Producer(broker.address) as producer:
        for body in bodies:
            producer.send(topic, body.encode())  # raises if not stored


def _listed(namesrv: Namesrv, *names: str) -> None:
    def listed() -> bool:
        options = parse_options({"namesrv": namesrv.addr}, streaming=False)
        try:
            return set(names) <= set(discover(options))
        except Exception:  # not registered yet
            return False

    wait_for(listed, 60, f"brokers {names} registered")


def _stored(broker: BrokerProcess) -> list[tuple[str, str, int]]:
    name, records = broker.store_dir.name, read_records(broker.store_dir)
    return [(name, bytes(r.body).decode(), r.physical_offset) for r in records]


@pytest.fixture(scope="module")
def brokers(
    namesrv: Namesrv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, BrokerProcess]]:
    root = tmp_path_factory.mktemp("brokers")
    pairs = (("bk-a", "TA"), ("bk-b", "TB"))
    started = {name: _broker(namesrv, root, name, topic) for name, topic in pairs}
    try:
        _send(started["bk-a"], "TA", [f"a{i}" for i in range(30)])
        _send(started["bk-b"], "TB", [f"b{i}" for i in range(20)])
        _listed(namesrv, *started)
        yield started
    finally:
        for broker in started.values():
            broker.stop()


def test_discovery_reports_each_brokers_absolute_store(namesrv, brokers) -> None:
    found = discover(parse_options({"namesrv": namesrv.addr, "cluster": CLUSTER}, streaming=False))
    assert {name: store.path for name, store in found.items()} == {
        name: str(broker.store_dir.resolve()) for name, broker in brokers.items()
    }


def test_batch_reads_every_message_of_both_brokers_once(spark, namesrv, brokers) -> None:
    df = spark.read.format("rocketmq").option("namesrv", namesrv.addr).load()
    assert df.columns[-1] == "broker_name" and "store" not in df.columns
    rows = df.select("broker_name", "body", "physical_offset").collect()
    got = sorted((r.broker_name, bytes(r.body).decode(), r.physical_offset) for r in rows)
    assert got == sorted(_stored(brokers["bk-a"]) + _stored(brokers["bk-b"]))
    assert len(got) == 50
    only = spark.read.format("rocketmq").option("namesrv", namesrv.addr)
    assert only.option("cluster", CLUSTER).load().count() == 50


def _stream(spark: Any, namesrv: Namesrv, checkpoint: Path, seen: list) -> None:
    def sink(df: Any, _batch_id: int) -> None:
        seen.extend((r.broker_name, bytes(r.body).decode()) for r in df.collect())

    query = (
        spark.readStream.format("rocketmq")
        .option("namesrv", namesrv.addr)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "16")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()


def _last_offset(checkpoint: Path) -> dict:
    offsets = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    return json.loads(offsets[-1].read_text().splitlines()[-1])


def test_stream_exactly_once_across_restarts_a_joining_and_a_leaving_broker(
    spark, namesrv, brokers, tmp_path
) -> None:
    checkpoint, seen = tmp_path / "checkpoint", []
    _stream(spark, namesrv, checkpoint, seen)
    assert sorted(seen) == sorted(
        (n, b) for n, b, _ in _stored(brokers["bk-a"]) + _stored(brokers["bk-b"])
    )
    # a broker with messages written before it joins, and more messages on an old one
    joined = _broker(namesrv, tmp_path, "bk-c", "TC")
    try:
        _send(joined, "TC", [f"c{i}" for i in range(12)])
        _send(brokers["bk-a"], "TA", ["a-late"])
        _listed(namesrv, "bk-c")
        _stream(spark, namesrv, checkpoint, seen)
        assert set(_last_offset(checkpoint)["brokers"]) == {"bk-a", "bk-b", "bk-c"}
    finally:
        joined.stop()  # a clean stop unregisters it: it left
    every = [(n, b) for broker in (*brokers.values(), joined) for n, b, _ in _stored(broker)]
    assert sorted(seen) == sorted(every)  # exactly once: no repeats, nothing missing
    wait_for(
        lambda: "bk-c" not in discover(parse_options({"namesrv": namesrv.addr}, streaming=True)),
        60, "bk-c to leave",
    )  # fmt: skip
    before = _last_offset(checkpoint)["brokers"]["bk-c"]
    _send(brokers["bk-b"], "TB", ["b-late"])
    _stream(spark, namesrv, checkpoint, seen)
    assert sorted(seen) == sorted([*every, ("bk-b", "b-late")])
    assert _last_offset(checkpoint)["brokers"]["bk-c"] == before  # it kept its offset


def test_an_unreachable_or_bad_namesrv_fails_at_load_in_one_line(spark, namesrv, brokers) -> None:
    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(Exception, match=f"no name server answered \\({dead}: ") as caught:
        spark.read.format("rocketmq").option("namesrv", dead).load()
    assert "Traceback" not in str(caught.value)
    with pytest.raises(Exception, match="option namesrv='nohost' is invalid"):
        spark.read.format("rocketmq").option("namesrv", "nohost").load()
    with pytest.raises(Exception, match="option cluster='Other': name server .* lists Spark"):
        spark.read.format("rocketmq").option("namesrv", namesrv.addr).option(
            "cluster", "Other"
        ).load()
    with pytest.raises(Exception, match="namesrv and path .* exclude each other"):
        spark.read.format("rocketmq").option("namesrv", namesrv.addr).load("/tmp")


def test_stores_outside_store_roots_are_refused(spark, namesrv, brokers, tmp_path) -> None:
    reader = spark.read.format("rocketmq").option("namesrv", namesrv.addr)
    refused = r"broker bk-a \(.*\) reports store .* not under storeRoots"
    with pytest.raises(Exception, match=refused):
        reader.option("storeRoots", str(tmp_path)).load()
    roots = ",".join(str(b.store_dir.parent) for b in brokers.values())
    stored = sum(len(_stored(broker)) for broker in brokers.values())
    assert reader.option("storeRoots", roots).load().count() == stored


def test_a_replay_reads_a_departed_broker_only_from_a_checked_path(namesrv, brokers, tmp_path):
    """A batch run again after a restart reads a broker the name server no longer lists from
    the store path its offset keeps; that path is checked as a discovered one (a checkpoint
    can name any path): under ``storeRoots``, a store, and no other broker's."""
    from rmq_spark.spark.cluster_reader import cluster_schema, cluster_stream_reader

    gone = _broker(namesrv, tmp_path, "bk-gone", "TG")
    _send(gone, "TG", ["g0"])
    gone_store = str(gone.store_dir.resolve())
    gone.stop()  # unregisters: the name server no longer lists it
    roots = ",".join(str(p) for p in {b.store_dir.parent.resolve() for b in brokers.values()})
    roots += f",{tmp_path.resolve()}"
    options = parse_options({"namesrv": namesrv.addr, "storeRoots": roots}, streaming=True)
    wait_for(lambda: "bk-gone" not in discover(options), 60, "bk-gone to leave")
    reader = cluster_stream_reader(options, cluster_schema(options))
    start = reader.initialOffset()
    brokers_at = {**start["brokers"], "bk-gone": {"physical_offset": 0}}
    end = {"brokers": {**brokers_at, "bk-gone": {"physical_offset": 1}}}
    begin = {"brokers": brokers_at}

    def planned(stores: dict[str, str] | None) -> list:
        return reader.partitions(begin, end if stores is None else {**end, "stores": stores})

    with pytest.raises(SourceError, match="broker bk-gone left the cluster, .* bring it back"):
        planned(None)  # a checkpoint written before offsets kept paths
    with pytest.raises(SourceError, match="reports store .* not under storeRoots"):
        planned({"bk-gone": str(Path("/").resolve())})
    with pytest.raises(SourceError, match="no readable commitlog/ directory"):
        planned({"bk-gone": str(tmp_path.resolve())})
    a_store = str(brokers["bk-a"].store_dir.resolve())
    with pytest.raises(SourceError, match="but it is broker bk-a's"):
        planned({"bk-gone": a_store})
    assert {p.store for p in planned({"bk-gone": gone_store})} == {"bk-gone"}
