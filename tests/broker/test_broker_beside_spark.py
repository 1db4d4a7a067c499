"""The broker beside Spark on one machine: it keeps its own CPU share and answers in time.

Linux gives every session an equal CPU share (scheduler autogroups). A broker started from
the same script as the reput job and other CPU-bound work used to share one share with all
of it, and the official client's sends ended ``CANCELLED`` (the broker answered after the
client's deadline). The broker now leads a session of its own (``take_own_cpu_share``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker_harness import REPO_ROOT, BrokerProcess, wait_for

RATE_PER_S = 500
SECONDS = 10
BURNERS = 3
START_DEADLINE_S = 600.0  # a bound for a loaded 2-core machine, not a timing assertion

# Paced async sends with the official client; prints one JSON line: counts and latencies.
PRODUCER = """
import json, sys, threading, time
import rocketmq
address, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
config = rocketmq.ClientConfiguration(address, rocketmq.Credentials(), request_timeout=3)
producer = rocketmq.Producer(config, ("beside",))
producer.startup()
lock, latencies, failures, sent = threading.Lock(), [], [], 0
def on_done(started):
    def done(future):
        try:
            future.result()
            with lock:
                latencies.append(time.monotonic() - started)
        except Exception as err:
            with lock:
                failures.append(repr(err)[:160])
    return done
begin = time.monotonic()
while time.monotonic() - begin < seconds:
    pause = begin + sent / rate - time.monotonic()
    if pause > 0:
        time.sleep(pause)
    message = rocketmq.Message()
    message.topic, message.body = "beside", b"x" * 100
    producer.send_async(message).add_done_callback(on_done(time.monotonic()))
    sent += 1
deadline = time.monotonic() + 30
while len(latencies) + len(failures) < sent and time.monotonic() < deadline:
    time.sleep(0.1)
latencies.sort()
print(json.dumps({"sent": sent, "ok": len(latencies), "failures": failures[:5],
                  "failed": len(failures),
                  "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)] if latencies else None}))
producer.shutdown()
"""


def test_the_broker_server_leads_a_session_of_its_own(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory()
    assert os.getsid(broker.proc.pid) == broker.proc.pid
    assert os.getsid(broker.proc.pid) != os.getsid(0)
    assert broker.stop() == 0


@pytest.fixture
def burners() -> Iterator[Callable[[], None]]:
    """Starts CPU-bound processes in this test's session, where the broker was started; they
    run from the call to the test's end (not through the reput's JVM start, which they would
    only stretch, and the other test worker's tests with it)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        code = "while True: pass"
        procs.extend(subprocess.Popen([sys.executable, "-c", code]) for _ in range(BURNERS))

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _produce(address: str, rate: int, seconds: float, env: dict[str, str]) -> dict:
    produced = subprocess.run(
        [sys.executable, "-c", PRODUCER, address, str(rate), str(seconds)],
        capture_output=True, text=True, env=env, timeout=START_DEADLINE_S,
        start_new_session=True,  # the client is not what is starved here
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr[-2000:]
    return json.loads(produced.stdout.strip().splitlines()[-1])


def _logged(job: subprocess.Popen[bytes], log_path: Path, text: str) -> None:
    """Wait for ``text`` in the job's log; a job that exited fails at once, with its log."""

    def seen() -> bool:
        log = log_path.read_text(errors="replace")
        assert job.poll() is None, f"the reput job exited with {job.returncode}:\n{log[-3000:]}"
        return text in log

    wait_for(seen, START_DEADLINE_S, text)


@pytest.mark.slow
@pytest.mark.spark
def test_no_send_fails_while_the_reput_job_and_cpu_bound_work_run_beside_the_broker(
    broker_factory: Callable[..., BrokerProcess],
    tmp_path: Path,
    burners: Callable[[], None],
) -> None:
    broker = broker_factory("store.flush_policy=SYNC")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, HOME=str(tmp_path))
    # One message first: the job's first batch starts its Python workers before the burners
    # do (Spark gives a starting Python worker 10 s to connect back, then fails the query).
    first = _produce(broker.address, 1, 0.001, env)
    assert first["failed"] == 0 and first["ok"] == first["sent"] >= 1, first
    log_path = tmp_path / "reput.log"
    with log_path.open("w") as log:
        reput = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "jobs" / "reput.py"), "--store",
             str(broker.store_dir), "--tables", str(tmp_path / "tables"), "--trigger", "1s"],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        _logged(reput, log_path, "reput batch 0:")
        burners()
        result = _produce(broker.address, RATE_PER_S, SECONDS, env)
        assert result["failed"] == 0 and result["ok"] == result["sent"], result
        # ... and the reput job did read what was sent meanwhile.
        _logged(reput, log_path, "reput batch 1:")
    finally:
        reput.send_signal(signal.SIGTERM)
        try:
            reput.wait(timeout=120)
        except subprocess.TimeoutExpired:
            reput.kill()
            reput.wait()
    assert broker.stop() == 0
