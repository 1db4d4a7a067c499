"""Regenerate ``pop_retry.hex``: the CommitLog of a real Apache RocketMQ 5.3.3 broker whose
group ``G1`` failed one message of topic ``Jobs`` twice, so that RocketMQ's POP revive wrote it
twice into its retry topic ``%RETRY%G1_Jobs`` (RECONSUMETIMES 1, then 2); and
``pop_retry_topics.json``, that broker's ``config/topics.json``.

Needs Java 17 and Maven (the peer's jars, ``bench/peers/rocketmq_peer.py``) and takes about a
minute; run it alone (``flock /tmp/bench.lock``)::

    PYTHONPATH=$PWD .venv/bin/python tests/golden/rocketmq_broker/make_pop_retry.py
"""

from __future__ import annotations

import struct
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "bench" / "peers"))
sys.path.insert(0, str(ROOT / "tests" / "golden"))

SEGMENT_BYTES = 16 << 20


def _fail_twice(rocketmq: object, endpoint: str) -> list[int]:
    """Send one message, receive it three times as G1 (acknowledging the third)."""
    config = rocketmq.ClientConfiguration(endpoint, rocketmq.Credentials(), request_timeout=10)
    producer = rocketmq.Producer(config, ("Jobs",))
    producer.startup()
    message = rocketmq.Message()
    message.topic, message.body, message.tag = "Jobs", b"poison", "T"
    for _ in range(30):  # the route appears a little after the proxy's port opens
        try:
            producer.send(message)
            break
        except Exception:  # the client raises its own exception types
            time.sleep(1)
    producer.shutdown()
    subscription = {"Jobs": rocketmq.FilterExpression("*")}
    consumer = rocketmq.SimpleConsumer(config, "G1", subscription, await_duration=3)
    consumer.startup()
    attempts: list[int] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(attempts) < 3:
        try:
            received = list(consumer.receive(1, 10) or [])  # invisible for 10 s
        except Exception:  # no settings yet right after startup
            time.sleep(1)
            continue
        for got in received:
            attempts.append(got.delivery_attempt)
            if len(attempts) == 3:
                consumer.ack(got)
    consumer.shutdown()
    return attempts


def main() -> None:
    from produce import import_client
    from rocketmq_peer import RocketMQBroker

    rocketmq = import_client()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp)
        with RocketMQBroker(
            topics=("Jobs",),
            store_dir=store,
            heap="384m",
            namesrv_heap="128m",
            broker_properties={"mappedFileSizeCommitLog": SEGMENT_BYTES},
        ) as peer:
            attempts = _fail_twice(rocketmq, peer.endpoint)
        assert attempts == [1, 2, 3], attempts
        data = (store / "commitlog" / "00000000000000000000").read_bytes()
        topics = (store / "config" / "topics.json").read_text(encoding="utf-8")
    (HERE / "pop_retry_topics.json").write_text(topics, encoding="utf-8")
    end = 0
    while end + 4 <= len(data) and (size := struct.unpack_from(">i", data, end)[0]) > 0:
        end += size
    lines = [data[i : i + 32].hex() for i in range(0, end, 32)]
    header = "# CommitLog of Apache RocketMQ 5.3.3 (make_pop_retry.py); 32 bytes a line\n"
    (HERE / "pop_retry.hex").write_text(header + "\n".join(lines) + "\n", encoding="ascii")
    print(f"pop_retry.hex: {end} bytes")


if __name__ == "__main__":
    main()
