"""One streaming query over a two-broker cluster found through a real name server
(``option("namesrv")``), while our ``Producer`` sends round-robin over both brokers: broker-b
is SIGKILLed mid-stream and the query stopped; the checkpoint is rewound as a crash between a
batch's plan and its commit leaves it, to the last batch that read broker-b, and the query
restarts while broker-b is gone from the name server, so Spark runs that batch again from
broker-b's store alone (its path kept in the offset); then broker-b restarts on its store. The
stream sees every record of both stores exactly once (each ``(broker_name, physical_offset)``
once; the batch run again brings the same rows), every acknowledged id among them, and its
offsets are per broker (``{"brokers": {name: {"physical_offset": N}}, "stores": ...}``)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker.broker_harness import props, read_records, wait_for
from cluster_harness import ClusterBroker, cluster_brokers, wait_route
from namesrv_harness import Namesrv

from rmq_spark.broker.producer import Producer

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TOPIC = "SparkStream"
SETTINGS = (f"broker.topics={TOPIC}:4", "broker.auto_create_topics=false")


@pytest.fixture
def two(tmp_path: Path, namesrv: Namesrv) -> Iterator[list[ClusterBroker]]:
    yield from cluster_brokers(tmp_path, namesrv, *SETTINGS)


class Sender:
    """Our ``Producer`` sending from a thread until stopped; keeps (id, broker) of each ack."""

    def __init__(self, access_point: str) -> None:
        self.acked: list[tuple[str, str]] = []
        self.failed = 0
        self._stop = threading.Event()
        self._producer = Producer(access_point, route_refresh_s=2, request_timeout_s=3)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                receipt = self._producer.send(TOPIC, f"m{i}".encode())
            except Exception:  # counted; the producer goes on
                self.failed += 1
                continue
            self.acked.append((receipt.message_id, receipt.broker))
            i += 1

    def count(self, broker: str) -> int:
        return sum(1 for _, name in list(self.acked) if name == broker)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self._producer.close()


class Batches:
    """What the stream's ``foreachBatch`` got, by batch id, as an idempotent sink keeps it.

    Spark runs a batch again after a restart when it was stopped between the sink and the
    batch's commit: the same batch id over the same offsets, so it must bring the same rows
    (kept in ``replays`` to compare); a sink that appended blindly would count them twice."""

    def __init__(self) -> None:
        self.by_id: dict[int, list[tuple[str, int, str]]] = {}
        self.replays: list[tuple[int, bool]] = []  # (batch id, the same rows as before)
        self._lock = threading.Lock()

    def sink(self, df: Any, batch_id: int) -> None:
        picked = df.select("broker_name", "physical_offset", "uniq_key").collect()
        rows = [(r.broker_name, r.physical_offset, r.uniq_key) for r in picked]
        with self._lock:
            if batch_id in self.by_id:
                self.replays.append((batch_id, self.by_id[batch_id] == rows))
            self.by_id[batch_id] = rows

    def forget_after(self, batch_id: int) -> None:
        """The checkpoint was rewound to ``batch_id``: later ids will be planned again."""
        with self._lock:
            self.by_id = {k: v for k, v in self.by_id.items() if k <= batch_id}

    def last_id(self) -> int:
        """The highest batch id the sink got (-1 before any)."""
        with self._lock:
            return max(self.by_id, default=-1)

    def rows(self) -> list[tuple[str, int, str]]:
        with self._lock:
            return [row for _, rows in sorted(self.by_id.items()) for row in rows]


def _start(spark: Any, namesrv: Namesrv, checkpoint: Path, seen: Batches) -> Any:
    return (
        spark.readStream.format("rocketmq")
        .option("namesrv", namesrv.addr)
        .option("startingOffsets", "earliest")
        .option("topics", TOPIC)
        .load()
        .writeStream.foreachBatch(seen.sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )


def _stored(brokers: list[ClusterBroker]) -> list[tuple[str, int, str]]:
    found = []
    for broker in brokers:
        for r in read_records(broker.store):
            if r.topic == TOPIC:
                found.append((broker.name, r.physical_offset, props(r).get("UNIQ_KEY")))
    return found


def _ran(query: Any, batches: int) -> bool:
    """``query`` reported ``batches`` progresses; a failed query fails the wait at once."""
    if query.exception() is not None:
        raise AssertionError(f"the query failed: {query.exception()}")
    return len(query.recentProgress) >= batches


def _batch_offsets(checkpoint: Path) -> dict[int, dict]:
    found = {}
    for path in (checkpoint / "offsets").glob("[0-9]*"):
        found[int(path.name)] = json.loads(path.read_text().splitlines()[-1])
    return found


def _last_read_of(checkpoint: Path, broker: str) -> int:
    """The id of the last batch planned that moved ``broker``'s offset (-1 before any)."""
    offsets = _batch_offsets(checkpoint)
    ends = {n: o["brokers"].get(broker) for n, o in offsets.items()}
    return max((n for n in offsets if ends[n] != ends.get(n - 1)), default=-1)  # 0: from start


def _rewind_to_last_read_of(checkpoint: Path, broker: str) -> int:
    """Leave the checkpoint as a crash right after planning the last batch that read
    ``broker`` would: that batch planned, not committed, nothing after it. Its id."""
    last = _last_read_of(checkpoint, broker)
    for kind in ("offsets", "commits"):
        for path in (checkpoint / kind).iterdir():  # "N" and Hadoop's checksum ".N.crc"
            found = re.fullmatch(r"\.?(\d+)(\.crc)?", path.name)
            number = int(found.group(1)) if found else -1
            if number > last or (kind == "commits" and number == last):
                path.unlink()
    return last


def _last_offset(checkpoint: Path) -> dict:
    offsets = _batch_offsets(checkpoint)
    return offsets[max(offsets)]


def test_stream_sees_every_message_once_across_a_broker_kill_and_a_query_restart(
    spark: Any, namesrv: Namesrv, two: list[ClusterBroker], tmp_path: Path
) -> None:
    a, b = two
    for broker in two:
        wait_route(broker.address, TOPIC, {"broker-a", "broker-b"})
    checkpoint, seen = tmp_path / "checkpoint", Batches()
    sender = Sender(a.address)
    query = _start(spark, namesrv, checkpoint, seen)
    try:
        wait_for(lambda: {n for n, _, _ in seen.rows()} == {"broker-a", "broker-b"}, 180,
                 "the stream to read both brokers")  # fmt: skip
        b.kill()  # mid-stream: its acknowledged messages are in its store's page cache
        at_kill = sender.count("broker-a")
        wait_for(lambda: sender.count("broker-a") >= at_kill + 200, 120, "sends to broker-a")
        # The batch run again below must have reached the sink before this stop: a stop that
        # interrupts it leaves nothing to compare its second run with.
        wait_for(lambda: seen.last_id() > _last_read_of(checkpoint, "broker-b"), 120,
                 "a batch after the last one that read broker-b")  # fmt: skip
        query.stop()
        assert query.exception() is None, query.exception()
        wait_route(a.address, TOPIC, {"broker-a"})  # the name server no longer lists broker-b
        replayed = _rewind_to_last_read_of(checkpoint, "broker-b")
        seen.forget_after(replayed)
        query = _start(spark, namesrv, checkpoint, seen)
        wait_for(lambda: _ran(query, 2), 120, "the restarted query to run")
        assert (replayed, True) in seen.replays, (replayed, seen.replays)
        b.start(namesrv, *SETTINGS)
        wait_route(a.address, TOPIC, {"broker-a", "broker-b"})
        back = sender.count("broker-b")
        wait_for(lambda: sender.count("broker-b") > back + 50, 120, "sends to restarted b")
    finally:
        sender.stop()
    try:
        every = _stored(two)
        wait_for(lambda: len(seen.rows()) >= len(every), 180, "the stream to catch up")
    finally:
        query.stop()
        for broker in two:
            broker.kill()
    assert query.exception() is None, query.exception()
    assert all(same for _, same in seen.replays), seen.replays  # a replay reads the same rows
    rows = seen.rows()
    assert len(rows) == len(set(rows)), "a record was read twice"
    assert sorted(rows) == sorted(every)
    acked = {message_id for message_id, _ in sender.acked}
    assert acked <= {key for _, _, key in rows}, "an acknowledged message was not read"
    last = _last_offset(checkpoint)
    offsets = last["brokers"]
    assert set(offsets) == {"broker-a", "broker-b"}
    assert all(set(each) == {"physical_offset"} for each in offsets.values())
    assert last["stores"] == {broker.name: str(broker.store.resolve()) for broker in two}
