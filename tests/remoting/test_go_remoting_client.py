"""rocketmq-client-go/v2 (the remoting client, from the Go module proxy; go.sum pins it)
against an rmq-spark broker through ``rmq-spark namesrv`` (issue 26): its producer's sends are
stored, its push consumer receives every one, and the group's offsets end committed at the
queues' ends. ``go/remotingcheck`` is built once into ``.cache/go``; the build and the run hold
the machine-wide bench lock."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from broker.broker_harness import read_records, wait_for
from namesrv_harness import REPO_ROOT, Namesrv
from remoting_harness import start_remoting_broker

from rmq_spark.broker.config_files.rocketmq_config_files import read_consumer_offsets

pytestmark = [
    pytest.mark.bench_lock,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("go") is None, reason="needs a Go toolchain (go)"),
]

PROGRAM = Path(__file__).parent / "go" / "remotingcheck"
LOCK = "/tmp/bench.lock"
TOPIC = "GoTopic"
GROUP = "gGo"
COUNT = 40


def _build() -> Path:
    binary = REPO_ROOT / ".cache" / "go" / "remotingcheck"
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
    built = subprocess.run(
        ["flock", "-o", LOCK, "go", "build", "-o", str(binary), "."],
        cwd=PROGRAM, capture_output=True, text=True, timeout=1200, env=env, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    return binary


@pytest.mark.timeout(1800)  # the build and the run may wait for the bench lock
def test_go_producer_and_push_consumer_through_the_name_server(
    namesrv: Namesrv, tmp_path: Path
) -> None:
    binary = _build()
    broker, _port = start_remoting_broker(
        tmp_path / "store", tmp_path / "work", f"broker.namesrv_addr={namesrv.addr}",
        f"broker.topics={TOPIC}:4",
    )  # fmt: skip
    try:
        wait_for(lambda: "registered broker" in broker.log_text(), 60, "registration")
        done = subprocess.run(
            ["flock", "-o", LOCK, str(binary), namesrv.addr, TOPIC, GROUP, str(COUNT)],
            capture_output=True, text=True, timeout=1200, check=False,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        lines = done.stdout.splitlines()
        assert lines and lines[-1] == "DONE", f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        sent = [line.split() for line in lines if line.startswith("SENT ")]
        bodies = {fields[4] for fields in sent}
        assert len(bodies) == COUNT
        received = {line.split()[3] for line in lines if line.startswith("RECV ")}
        assert received == bodies
        stored = [r for r in read_records(broker.store_dir) if r.topic == TOPIC]
        assert sorted(r.body.decode() for r in stored) == sorted(bodies)
        at = {(r.queue_id, r.queue_offset): r.body.decode() for r in stored}
        for _tag, _msg_id, queue, offset, body in sent:  # the SendResult names the record
            assert at[(int(queue), int(offset))] == body
        ends = dict(Counter(r.queue_id for r in stored))
        try:
            wait_for(
                lambda: read_consumer_offsets(broker.store_dir).get((TOPIC, GROUP)) == ends, 30,
                f"the group's offsets committed at the queues' ends {ends}",
            )  # fmt: skip
        except AssertionError as err:  # what was committed, and what both sides said
            committed = read_consumer_offsets(broker.store_dir).get((TOPIC, GROUP))
            raise AssertionError(  # the verdict last: a long report may be cut at its head
                f"client: {done.stderr[-3000:]}\nbroker: {broker.log_text()[-3000:]}\n"
                f"{err}; committed {committed}"
            ) from None
    finally:
        assert broker.stop() == 0
