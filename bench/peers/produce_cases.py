"""The produce workload's cases, client side: closed-loop and paced sends, timed per send.

Every case drives the given started ``Producer`` objects (one per thread) of the official
``rocketmq-python-client`` and returns a ``CaseResult``: messages sent and failed, wall time,
every successful send's latency (from the client call to the receipt) and the CPU seconds that
the broker's processes (``/proc/<pid>/stat`` utime + stime) and this client process spent.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["CaseResult", "closed_loop", "paced", "warm_up"]

DRAIN_TIMEOUT_S = 120.0
TICKS = os.sysconf("SC_CLK_TCK")


def broker_cpu_s(pids: Sequence[int]) -> float:
    """CPU seconds (user + system) the processes ``pids`` and their live descendants (a
    broker's native front) have used so far."""
    total = 0
    for pid in _with_descendants(pids):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue  # a descendant that ended meanwhile
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / TICKS


def _with_descendants(pids: Sequence[int]) -> list[int]:
    found, queue = [], list(pids)
    while queue:
        pid = queue.pop()
        found.append(pid)
        for children in Path(f"/proc/{pid}/task").glob("*/children"):
            try:
                queue.extend(int(child) for child in children.read_text().split())
            except FileNotFoundError:
                continue
    return found


def client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclasses.dataclass(frozen=True)
class CaseResult:
    label: str
    paced: bool
    sent: int
    failed: int
    seconds: float
    latencies_s: tuple[float, ...]  # sorted
    broker_cpu_s: float
    client_cpu_s: float
    first_error: str = ""
    quantiles_ms: tuple[float, float] | None = None  # (p50, p99) when only those are known

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds else 0.0

    def _pct(self, fraction: float) -> float:
        if not self.latencies_s:
            return float("nan")
        index = min(len(self.latencies_s) - 1, round(fraction * (len(self.latencies_s) - 1)))
        return self.latencies_s[index] * 1000

    @property
    def p50_ms(self) -> float:
        return self.quantiles_ms[0] if self.quantiles_ms else self._pct(0.50)

    @property
    def p99_ms(self) -> float:
        return self.quantiles_ms[1] if self.quantiles_ms else self._pct(0.99)

    @property
    def broker_cpu_us_per_msg(self) -> float:
        return self.broker_cpu_s / self.sent * 1e6 if self.sent else float("nan")

    def cell(self) -> str:
        failed = f", **{self.failed} failed**" if self.failed else ""
        head = f"{self.rate:,.0f} msgs/s, " if not self.paced else f"{self.sent:,} sent, "
        return (
            f"{head}p50 {self.p50_ms:.1f} ms, p99 {self.p99_ms:.1f} ms, broker CPU "
            f"{self.broker_cpu_us_per_msg:,.0f} us/msg{failed}"
        )

    def summary(self) -> str:
        error = f" (first error: {self.first_error})" if self.first_error else ""
        client = (
            ""
            if self.client_cpu_s != self.client_cpu_s
            else f", client CPU {self.client_cpu_s:.1f} s "
            f"({self.client_cpu_s / max(self.sent, 1) * 1e6:,.0f} us/msg)"
        )
        return (
            f"{self.label}: {self.sent:,} sent in {self.seconds:.1f} s = {self.rate:,.0f} msgs/s, "
            f"p50 {self.p50_ms:.1f} ms, p99 {self.p99_ms:.1f} ms, {self.failed} failed, broker "
            f"CPU {self.broker_cpu_s:.1f} s ({self.broker_cpu_us_per_msg:,.0f} us/msg){client}"
            f"{error}"
        )


class _Recorder:
    """Latencies and failures from many threads and client callbacks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.failed = 0
        self.first_error = ""

    def done(self, started: float, error: BaseException | None) -> None:
        elapsed = time.perf_counter() - started
        with self.lock:
            if error is None:
                self.latencies.append(elapsed)
            else:
                self.failed += 1
                self.first_error = self.first_error or f"{type(error).__name__}: {error}"[:300]


def _message(rocketmq: ModuleType, topic: str, body: bytes) -> Any:
    message = rocketmq.Message()
    message.topic = topic
    message.body = body
    message.tag = "bench"
    return message


def _measure(
    label: str,
    paced: bool,
    pids: Sequence[int],
    workers: Sequence[Callable[[_Recorder], None]],
) -> CaseResult:
    recorder = _Recorder()
    threads = [threading.Thread(target=work, args=(recorder,)) for work in workers]
    cpu0, client0 = broker_cpu_s(pids), client_cpu_s()
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    return CaseResult(
        label=label,
        paced=paced,
        sent=len(recorder.latencies),
        failed=recorder.failed,
        seconds=seconds,
        latencies_s=tuple(sorted(recorder.latencies)),
        broker_cpu_s=broker_cpu_s(pids) - cpu0,
        client_cpu_s=client_cpu_s() - client0,
        first_error=recorder.first_error,
    )


def warm_up(
    rocketmq: ModuleType, producers: Sequence[Any], topic: str, body: bytes, n: int
) -> None:
    """``n`` synchronous sends per producer, not timed."""
    for producer in producers:
        for _ in range(n):
            producer.send(_message(rocketmq, topic, body))


def closed_loop(
    rocketmq: ModuleType,
    producers: Sequence[Any],
    topic: str,
    body: bytes,
    inflight: int,
    seconds: float,
    pids: Sequence[int],
    count: int | None = None,
) -> CaseResult:
    """Each producer on its own thread keeps ``inflight`` sends going for ``seconds`` (or
    until the producers sent ``count`` in all); the case ends when the last one has completed.
    ``inflight == 1`` uses the blocking ``send``."""
    share = -(-count // len(producers)) if count is not None else None

    def sync_worker(producer: Any) -> Callable[[_Recorder], None]:
        def work(recorder: _Recorder) -> None:
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    producer.send(_message(rocketmq, topic, body))
                except Exception as err:  # noqa: BLE001 (counted and reported, the case goes on)
                    recorder.done(started, err)
                else:
                    recorder.done(started, None)

        return work

    def async_worker(producer: Any) -> Callable[[_Recorder], None]:
        def work(recorder: _Recorder) -> None:
            slots = threading.BoundedSemaphore(inflight)
            deadline = time.perf_counter() + seconds
            sent = 0
            while (sent < share) if share is not None else (time.perf_counter() < deadline):
                sent += 1
                slots.acquire()
                _submit(producer, _message(rocketmq, topic, body), recorder, slots.release)
            _drain(slots, inflight)

        return work

    make = sync_worker if inflight == 1 else async_worker
    label = f"{len(producers)} threads x {inflight} in flight, {len(body)} B, {seconds:.0f} s"
    return _measure(label, False, pids, [make(producer) for producer in producers])


def paced(
    rocketmq: ModuleType,
    producers: Sequence[Any],
    topic: str,
    body: bytes,
    rate: int,
    seconds: float,
    pids: Sequence[int],
    burners: int,
    stamp: Callable[[bytes], bytes] | None = None,
) -> CaseResult:
    """``rate`` msgs/s in all, each producer's share on a fixed schedule (send_async, so a slow
    send does not hold the next one back), for ``seconds``; ends when every send completed.
    ``stamp(body)``: each message's body, made when it is sent (e.g. with the send time)."""
    interval = len(producers) / rate

    def worker(producer: Any, offset: float) -> Callable[[_Recorder], None]:
        def work(recorder: _Recorder) -> None:
            pending = threading.Semaphore(0)
            start = time.perf_counter() + offset
            count = int(seconds / interval)
            for index in range(count):
                delay = start + index * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                data = stamp(body) if stamp is not None else body
                _submit(producer, _message(rocketmq, topic, data), recorder, pending.release)
            for _ in range(count):
                if not pending.acquire(timeout=DRAIN_TIMEOUT_S):
                    raise TimeoutError(f"sends still pending {DRAIN_TIMEOUT_S:.0f} s after the end")

        return work

    spread = interval / len(producers)
    label = (
        f"paced {rate} msgs/s for {seconds:.0f} s, {len(producers)} threads, {burners} CPU-bound "
        f"processes beside"
    )
    workers = [worker(producer, index * spread) for index, producer in enumerate(producers)]
    return _measure(label, True, pids, workers)


def _submit(producer: Any, message: Any, recorder: _Recorder, release: Callable[[], Any]) -> None:
    started = time.perf_counter()

    def finished(future: Any) -> None:
        recorder.done(started, future.exception())
        release()

    try:
        future = producer.send_async(message)
    except Exception as err:  # noqa: BLE001 (counted and reported, the case goes on)
        recorder.done(started, err)
        release()
        return
    future.add_done_callback(finished)


def _drain(slots: threading.BoundedSemaphore, inflight: int) -> None:
    for _ in range(inflight):
        if not slots.acquire(timeout=DRAIN_TIMEOUT_S):
            raise TimeoutError(f"sends still pending {DRAIN_TIMEOUT_S:.0f} s after the end")
