"""Manual check (JVMs; not collected by pytest): RocketMQ 5.3.3 takes over a store our broker wrote.

Writes a store with the embedded ``Broker`` (16 messages on the auto-created ``HandTopic``),
a ``consumerOffset.json`` that marks all but the last message of every queue consumed by group
``G1``, and ``G1``'s ``retryMaxTimes`` 3 in ``subscriptionGroup.json``; then starts a real
RocketMQ 5.3.3 name server + proxy (broker in-process, ``bench/peers/rocketmq_peer.py``) on a
copy of it *without* ``updateTopic``, and with the official Python client sends a FIFO and a
NORMAL message (``message.type`` MIXED in topics.json) and receives as ``G1``: exactly the
unconsumed messages plus the two new ones must arrive. Prints ``OK`` or ``MISMATCH``.

    flock -s /tmp/bench.lock flock /tmp/spark.lock \\
        .venv/bin/python tests/unit/rocketmq_reference/check_handover.py [--jars DIR]

``--jars``: a directory with RocketMQ's jars and ``manifest.txt`` (default: the peer's cache).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "bench" / "peers")]

import rocketmq_peer  # noqa: E402

from rmq_spark.broker.embedded import Broker  # noqa: E402
from rmq_spark.broker.rocketmq_config_files import (  # noqa: E402
    SubscriptionGroups,
    write_consumer_offsets,
)

TOPIC, GROUP = "HandTopic", "G1"


def write_our_store(store: Path) -> set[str]:
    """The store, its config files, and the bodies G1 has not consumed yet."""
    with Broker(store) as broker:
        outcomes = [broker.send(TOPIC, f"m{i}".encode(), tag="T") for i in range(16)]
    assert all(outcome.ok for outcome in outcomes), outcomes
    last: dict[int, int] = {}
    for outcome in outcomes:
        last[outcome.queue_id] = max(last.get(outcome.queue_id, 0), outcome.queue_offset)
    write_consumer_offsets(store, {(TOPIC, GROUP): last})
    SubscriptionGroups(store).update(GROUP, retry_max_times=3)
    return {f"m{i}" for i, o in enumerate(outcomes) if o.queue_offset == last[o.queue_id]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jars", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="handover-"))
    os.environ["HOME"] = str(work)  # the Python client logs under ~/logs
    expected = write_our_store(work / "ours") | {"new-fifo", "new-normal"}
    peer_dir = work / "peer"
    peer_dir.mkdir()
    shutil.copytree(work / "ours", peer_dir / "store")
    if args.jars is not None:
        names = (args.jars / "manifest.txt").read_text().split()
        rocketmq_peer.resolve_rocketmq_jars = lambda: [args.jars / name for name in names]
    # The peer keeps its store in <workdir>/store: hand it ours as its work directory.
    rocketmq_peer.tempfile.mkdtemp = lambda prefix="": str(peer_dir)

    import rocketmq

    with rocketmq_peer.RocketMQBroker(topics=()) as peer:
        config = rocketmq.ClientConfiguration(
            peer.endpoint, rocketmq.Credentials(), request_timeout=10
        )
        producer = rocketmq.Producer(config, (TOPIC,))
        producer.startup()
        for kind in ("fifo", "normal"):
            message = rocketmq.Message()
            message.topic, message.body, message.tag = TOPIC, f"new-{kind}".encode(), "T"
            if kind == "fifo":
                message.message_group = "order-1"
            producer.send(message)
        producer.shutdown()
        subscription = {TOPIC: rocketmq.FilterExpression("*")}
        consumer = rocketmq.SimpleConsumer(config, GROUP, subscription, await_duration=5)
        consumer.startup()
        time.sleep(5)  # the proxy answers receives only after the client's Telemetry settings
        received: set[str] = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(received) < len(expected):
            for message in consumer.receive(32, 30) or []:
                received.add(message.body.decode())
                consumer.ack(message)
        consumer.shutdown()
    print(f"expected {sorted(expected)}\nreceived {sorted(received)}")
    print("OK" if received == expected else "MISMATCH")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
