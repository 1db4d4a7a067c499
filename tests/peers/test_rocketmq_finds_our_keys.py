"""A real RocketMQ 5.3.3 broker that takes over our store finds our messages by key.

Our embedded ``Broker`` writes messages with KEYS (one key, several keys separated by a space,
a non-ASCII key, a key shared by two messages) to an auto-created topic and closes cleanly.
RocketMQ's name server and proxy (broker in-process, ``bench/peers/rocketmq_peer.py``) then
start on a copy of the store. RocketMQ's reput resumes at the end of the CommitLog, so it
never reads our records: only the ``index/`` files we wrote can answer. With RocketMQ's own
admin tool (``mqadmin``, ``rocketmq-tools``):

* ``queryMsgByKey`` finds every message under each of its keys (both messages of the shared
  key), and nothing under a key no message has;
* ``queryMsgByUniqueKey`` finds a message by the UNIQ_KEY our broker gave it;
* a message RocketMQ itself stores after the takeover is found by key too: its IndexService
  goes on in our last file.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from types import ModuleType

import pytest

from rmq_spark.broker.embedded import Broker
from rmq_spark.store.config import StoreConfig

pytestmark = pytest.mark.slow

TOPIC = "KeyedTopic"
SEGMENT_BYTES = 16 << 20  # small CommitLog segments; RocketMQ is told the same size
KEYED = {  # body -> KEYS
    "one": ("order-1",),
    "two": ("order-2", "customer-7"),
    "three": ("Bestellung-ä-😀",),
    "four": ("shared",),
    "five": ("shared",),
}
ROUTE_WAIT_S = 60.0


def _write_our_store(store: Path) -> dict[str, str]:
    """The store; returns each body's UNIQ_KEY (the message id clients see)."""
    with Broker(store, store_config=StoreConfig(segment_size_bytes=SEGMENT_BYTES)) as broker:
        ids = {}
        for i in range(30):  # unkeyed traffic around the keyed messages
            assert broker.send(TOPIC, f"plain-{i}".encode(), tag="T").ok
        for body, keys in KEYED.items():
            outcome = broker.send(TOPIC, body.encode(), tag="T", keys=keys)
            assert outcome.ok, outcome
            ids[body] = outcome.message_id
    return ids


def _wait_for_route(peer: object) -> None:
    """Until the name server routes the topic (the broker registers it from topics.json a
    little after the proxy's port opens; a query before that asks no broker)."""
    deadline = time.monotonic() + ROUTE_WAIT_S
    while True:
        try:
            out = peer.admin("topicRoute", "-t", TOPIC)  # type: ignore[attr-defined]
            if '"brokerName"' in out:
                return
        except Exception:  # PeerError: no route yet
            if time.monotonic() > deadline:
                raise
        time.sleep(1.0)


def _bodies_by_key(peer: object, key: str) -> int:
    """How many messages ``mqadmin queryMsgByKey`` lists for ``key``."""
    out = peer.admin("queryMsgByKey", "-t", TOPIC, "-k", key)  # type: ignore[attr-defined]
    return len(re.findall(r"^[0-9A-F]{32,}\s", out, re.MULTILINE))


def _send_keyed(rocketmq: ModuleType, config: object) -> None:
    producer = rocketmq.Producer(config, (TOPIC,))
    producer.startup()
    try:
        message = rocketmq.Message()
        message.topic, message.body, message.tag = TOPIC, b"after", "T"
        message.keys = "after-takeover"
        deadline = time.monotonic() + ROUTE_WAIT_S
        while True:
            try:
                assert producer.send(message).message_id
                return
            except Exception as err:  # the client raises its own exception types
                if "route" not in str(err).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
    finally:
        producer.shutdown()


def test_rocketmq_5_3_3_finds_our_messages_by_key(rocketmq: ModuleType, tmp_path: Path) -> None:
    from rocketmq_peer import RocketMQBroker  # bench/peers is on sys.path (conftest.py)

    ours, copy = tmp_path / "ours", tmp_path / "copy"
    ids = _write_our_store(ours)
    shutil.copytree(ours, copy)

    with RocketMQBroker(
        store_dir=copy,
        heap="384m",
        namesrv_heap="128m",
        broker_properties={"mappedFileSizeCommitLog": SEGMENT_BYTES},
    ) as peer:
        _wait_for_route(peer)
        for body, keys in KEYED.items():
            for key in keys:
                expected = 2 if key == "shared" else 1
                assert _bodies_by_key(peer, key) == expected, (body, key)
        assert _bodies_by_key(peer, "no-such-key") == 0
        shown = peer.admin("queryMsgByUniqueKey", "-t", TOPIC, "-i", ids["two"])
        assert ids["two"] in shown and "order-2 customer-7" in shown, shown
        config = rocketmq.ClientConfiguration(
            peer.endpoint, rocketmq.Credentials(), request_timeout=10
        )
        _send_keyed(rocketmq, config)
        assert _bodies_by_key(peer, "after-takeover") == 1
