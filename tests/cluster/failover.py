"""A producer run across a broker's SIGKILL and restart: 4 threads send until each phase has
what it needs; every acknowledged id and the broker it went to are kept for the checks."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.broker_harness import by_uniq_key, read_records, wait_for
from cluster_harness import ClusterBroker
from namesrv_harness import Namesrv

THREADS = 4
# Acknowledged sends per phase (before the kill, after it, after the restart); CI keeps it
# small; RMQ_CLUSTER_SENDS_PER_PHASE=10000 sends at least the 20,000 messages of a full run
# (the phase after the restart ends when the restarted broker takes sends again).
PER_PHASE = int(os.environ.get("RMQ_CLUSTER_SENDS_PER_PHASE", "400"))
PHASES = ("both", "killed", "restarted")


@dataclass
class Run:
    """What the threads saw: per phase, the acknowledged (id, broker) pairs and the failures,
    and the longest wait of one send (seconds)."""

    phase: str = "both"
    acked: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: {p: [] for p in PHASES})
    failed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    longest_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def brokers(self, phase: str) -> set[str]:
        with self.lock:
            return {broker for _, broker in self.acked[phase]}

    def count(self, phase: str) -> int:
        with self.lock:
            return len(self.acked[phase])


def run_across_a_kill(
    send: Callable[[int], tuple[str, str]],
    namesrv: Namesrv,
    brokers: list[ClusterBroker],
    *,
    per_phase: int = PER_PHASE,
    return_deadline_s: float = 150,
) -> Run:
    """Send from ``THREADS`` threads (``send(i) -> (message id, broker name)``): until both
    brokers took messages, then SIGKILL broker-b, ``per_phase`` more acks, restart it, and
    send until broker-b takes messages again. Both brokers are stopped at the end."""
    run = Run()
    counter = iter(range(10**9))

    def worker() -> None:
        while not run.stop.is_set():
            with run.lock:
                i, phase = next(counter), run.phase
            started = time.monotonic()
            try:
                message_id, broker = send(i)
            except Exception:  # a failed send: counted; the producer goes on
                with run.lock:
                    run.failed[phase] += 1
                continue
            finally:
                took = time.monotonic() - started
                with run.lock:
                    run.longest_s[phase] = max(run.longest_s[phase], took)
            with run.lock:
                run.acked[phase].append((message_id, broker))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    try:
        kill_and_restart(run, namesrv, brokers, per_phase, return_deadline_s)
    finally:
        run.stop.set()
        for thread in threads:
            thread.join(timeout=60)
        stop_all(brokers)
    return run


def record(run: Run, line: str) -> None:
    """One line of a producer program: ``ACK <id> <broker>`` or ``FAIL ...``."""
    with run.lock:
        if line.startswith("ACK "):
            _, message_id, broker = line.split()
            run.acked[run.phase].append((message_id, broker))
        elif line.startswith("FAIL"):
            run.failed[run.phase] += 1


def stop_all(brokers: list[ClusterBroker]) -> None:
    for broker in brokers:
        if broker.proc is not None and broker.proc.proc.poll() is None:
            broker.proc.stop()


def kill_and_restart(
    run: Run, namesrv: Namesrv, brokers: list[ClusterBroker], per_phase: int, deadline_s: float
) -> None:
    """The phases: both brokers take sends; broker-b SIGKILLed; restarted and taking sends."""
    _, b = brokers
    wait_for(lambda: run.count("both") >= per_phase and len(run.brokers("both")) == 2,
             120, "sends to both brokers")  # fmt: skip
    b.kill()
    with run.lock:
        run.phase = "killed"
    wait_for(lambda: run.count("killed") >= per_phase, 120, "sends after the kill")
    b.start(namesrv)
    with run.lock:
        run.phase = "restarted"
    wait_for(lambda: "broker-b" in run.brokers("restarted"), deadline_s,
             "sends to the restarted broker")  # fmt: skip


def assert_the_survivor_took_the_sends(run: Run) -> None:
    """After the kill the sends went to broker-a. Acks of broker-b can still be counted in
    that phase: given before the kill, read late from a client's buffered output; so broker-a
    must have taken most, not all. ``check_no_acknowledged_loss`` holds every ack, those
    included, to the store of the broker that gave it."""
    with run.lock:
        killed = [broker for _, broker in run.acked["killed"]]
    assert killed.count("broker-a") > killed.count("broker-b"), killed.count("broker-b")


def check_no_acknowledged_loss(run: Run, brokers: list[ClusterBroker]) -> dict[str, int]:
    """Every acknowledged id is in the store of the broker that acknowledged it; returns the
    count of acknowledged messages per broker."""
    stored = {broker.name: set(by_uniq_key(read_records(broker.store))) for broker in brokers}
    per_broker: dict[str, int] = {}
    for phase in PHASES:
        for message_id, broker in run.acked[phase]:
            assert message_id in stored[broker], (phase, message_id, broker)
            per_broker[broker] = per_broker.get(broker, 0) + 1
    return per_broker
