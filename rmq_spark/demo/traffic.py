"""Demo traffic: producers that send through the broker and remember every acknowledgement.

The official RocketMQ 5 client (``rocketmq-python-client``) sends normal, tagged, keyed and
timer (delivery-time) messages over gRPC; delay-level messages, which RocketMQ 5's gRPC API
cannot express, are sent the RocketMQ 4 way through the embedded broker. Every acknowledged
send is appended to ``acked.jsonl`` so that anyone (the demo's report, a test) can check it
against the tables. Owns no broker and no Spark.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, Any

__all__ = ["AckLog", "Acked", "DemoTraffic", "import_official_client"]

log = logging.getLogger("rmq_spark.demo")

TOPICS = ("Orders", "Payments", "Audit")
TAGS = ("created", "paid", "shipped", "refunded")
DELAY_LEVELS = (1, 2)  # 1 s and 5 s with the default messageDelayLevel
TIMER_DELAY_MS = (2_000, 6_000)


@dataclass(frozen=True, slots=True)
class Acked:
    """One acknowledged send."""

    message_id: str
    topic: str  # the topic the producer asked for
    kind: str  # NORMAL, TIMER or DELAY_LEVEL
    stored_topic: str
    physical_offset: int
    sent_ms: int
    due_ms: int | None = None  # delayed kinds: when it may be delivered at the earliest
    tag: str | None = None
    key: str | None = None


class AckLog:
    """Thread-safe counters and the ``acked.jsonl`` file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self.sent = 0
        self.acked: list[Acked] = []
        self.failed = 0

    def record(self, acked: Acked | None) -> None:
        with self._lock:
            self.sent += 1
            if acked is None:
                self.failed += 1
                return
            self.acked.append(acked)
            self._file.write(json.dumps(asdict(acked)) + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def delayed(self) -> list[Acked]:
        with self._lock:
            return [a for a in self.acked if a.due_ms is not None]


def import_official_client(home: Path) -> ModuleType:
    """Import ``rocketmq`` with HOME pointed at ``home`` (it writes ~/logs on import)."""
    home.mkdir(parents=True, exist_ok=True)
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:
        import rocketmq
    finally:
        if saved is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = saved
    return rocketmq


class DemoTraffic:
    """Producer threads that run until ``stop()``; ``rate_per_s`` per gRPC thread."""

    def __init__(
        self,
        broker: Any,
        acks: AckLog,
        client_home: Path,
        *,
        rate_per_s: float = 25.0,
        grpc_threads: int = 2,
        seed: int = 7,
    ) -> None:
        self._broker = broker
        self._acks = acks
        self._client_home = client_home
        self._rate_per_s = rate_per_s
        self._grpc_threads = grpc_threads
        self._random = random.Random(seed)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._producers: list[Any] = []
        self.errors: list[str] = []

    def start(self) -> None:
        rocketmq = import_official_client(self._client_home)
        for index in range(self._grpc_threads):
            config = rocketmq.ClientConfiguration(
                self._broker.address, rocketmq.Credentials(), request_timeout=10
            )
            producer = rocketmq.Producer(config, TOPICS)
            producer.startup()
            self._producers.append(producer)
            self._spawn(f"grpc-producer-{index}", self._grpc_loop, rocketmq, producer, index)
        self._spawn("delay-level-producer", self._delay_level_loop)

    def stop(self) -> None:
        """Stop sending and shut the official clients down; safe to call twice."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        producers, self._producers = self._producers, []
        for producer in producers:
            try:
                producer.shutdown()
            except Exception as err:  # the client's own shutdown errors are only reported
                log.warning("official client shutdown: %s", err)

    def _spawn(self, name: str, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=self._guard, args=(target, *args), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _guard(self, target: Any, *args: Any) -> None:
        try:
            target(*args)
        except Exception as err:
            self.errors.append(f"{threading.current_thread().name}: {err}")
            log.error("demo producer stopped: %s", err)

    def _pace(self, started: float, sent: int, rate_per_s: float) -> None:
        wait_s = started + sent / rate_per_s - time.monotonic()
        if wait_s > 0:
            self._stop.wait(wait_s)

    def _grpc_loop(self, rocketmq: ModuleType, producer: Any, index: int) -> None:
        rng = random.Random(index)
        started, count = time.monotonic(), 0
        while not self._stop.is_set():
            topic = TOPICS[count % len(TOPICS)]
            tag = rng.choice(TAGS)
            key = f"{topic.lower()}-{index}-{count}"
            message = rocketmq.Message()
            message.topic = topic
            message.body = json.dumps({"n": count, "producer": index, "tag": tag}).encode()
            message.tag = tag
            message.keys = key
            due_ms = None
            if count % 10 == 9:  # every tenth message: a timer message, delivered later
                due_ms = int(time.time() * 1000) + rng.randint(*TIMER_DELAY_MS)
                message.delivery_timestamp = due_ms
            sent_ms = int(time.time() * 1000)
            try:
                receipt = producer.send(message)
            except Exception as err:
                log.warning("send failed (%s); counted as not acknowledged", err)
                self._acks.record(None)
            else:
                self._acks.record(
                    Acked(
                        message_id=receipt.message_id,
                        topic=topic,
                        kind="TIMER" if due_ms is not None else "NORMAL",
                        stored_topic="rmq_sys_wheel_timer" if due_ms is not None else topic,
                        physical_offset=-1,  # the gRPC receipt carries queue offsets only
                        sent_ms=sent_ms,
                        due_ms=(due_ms // 1000 * 1000) if due_ms is not None else None,
                        tag=tag,
                        key=key,
                    )
                )
            count += 1
            self._pace(started, count, self._rate_per_s)

    def _delay_level_loop(self) -> None:
        levels_ms = {1: 1_000, 2: 5_000}
        started, count = time.monotonic(), 0
        while not self._stop.is_set():
            level = DELAY_LEVELS[count % len(DELAY_LEVELS)]
            key = f"reminder-{count}"
            sent_ms = int(time.time() * 1000)
            outcome = self._broker.send(
                "Orders",
                f"reminder {count}".encode(),
                tag="reminder",
                keys=(key,),
                delay_level=level,
            )
            if outcome.ok:
                self._acks.record(
                    Acked(
                        message_id=outcome.message_id,
                        topic="Orders",
                        kind="DELAY_LEVEL",
                        stored_topic=outcome.topic,
                        physical_offset=outcome.physical_offset,
                        sent_ms=sent_ms,
                        due_ms=sent_ms + levels_ms[level],
                        tag="reminder",
                        key=key,
                    )
                )
            else:
                log.warning("delay-level send refused: %s %s", outcome.code.name, outcome.reason)
                self._acks.record(None)
            count += 1
            self._pace(started, count, 2.0)
