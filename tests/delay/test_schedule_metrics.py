"""The schedule job's metrics: a real ``rmq-spark schedule --metrics-listen`` process scraped
over HTTP (delivered, pending and late messages, lateness), the late count of a pass cut
short, the CommitLog source's pending count, and a push to a Pushgateway's HTTP API."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from delay_world import DelayWorld
from prometheus_client.parser import text_string_to_metric_families

from rmq_spark.cli.main import main
from rmq_spark.delay.metrics import ScheduleMetrics
from rmq_spark.spark.job_metrics import JobMetrics
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

SMALL = ["--set", "store.segment_size_bytes=1048576"]  # the test stores' segments
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _parse(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        return _parse(response.read().decode("utf-8"))


@pytest.mark.slow
def test_a_running_schedule_job_serves_delivered_pending_and_late(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with MessageStore.open(StoreConfig(root_dir=store, segment_size_bytes=1 << 20)) as opened:
        for level, count in ((1, 3), (18, 2)):  # 1 s: due at once; 2 h: pending
            for i in range(count):
                properties = {"DELAY": str(level)}
                opened.put(PutRequest("orders", b"m%d" % i, properties=properties))
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    out = tmp_path / "out.txt"
    with out.open("wb") as sink:
        job = subprocess.Popen(
            [sys.executable, "-m", "rmq_spark.cli.main", "schedule", "--store", str(store),
             "--trigger", "200ms", "--metrics-listen", f"127.0.0.1:{port}", *SMALL],
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path,
        )  # fmt: skip
    key = (("store", str(store.absolute())),)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert job.poll() is None, out.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, out.read_text(errors="replace")[-3000:]
            try:
                samples = _scrape(url)
            except (urllib.error.URLError, ConnectionError):
                samples = {}
            if samples.get(("rmq_schedule_delivered_messages_total", key)) == 3:
                break
            time.sleep(0.3)
        assert samples[("rmq_schedule_pending_messages", key)] == 2
        assert samples[("rmq_schedule_late_messages", key)] == 0
        assert samples[("rmq_schedule_late_seconds", key)] == 0
        assert samples[("rmq_schedule_lateness_seconds_count", key)] == 3
        assert samples[("rmq_schedule_refused_messages_total", key)] == 0
        assert samples[("rmq_schedule_passes_total", key)] >= 1
        os.killpg(job.pid, signal.SIGTERM)
        assert job.wait(timeout=60) == 0, out.read_text(errors="replace")[-3000:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()


def test_a_pass_cut_short_leaves_late_messages_counted(world: DelayWorld) -> None:
    for i in range(4):
        world.put_delayed("orders", b"m%d" % i, 1)
    world.clock.advance(5_000)  # every message is 4 s past due
    job = JobMetrics("rmq-schedule", grouping={})
    metrics = ScheduleMetrics(job, [world.root])
    redeliverer = world.redeliverer(pass_messages_max=1, batch_messages_max=1)
    store = str(world.root.absolute())
    try:
        report = redeliverer.run_pass()
        metrics.after_pass(redeliverer, report)
        value = job.registry.get_sample_value
        assert value("rmq_schedule_delivered_messages_total", {"store": store}) == 1
        assert (value("rmq_schedule_late_messages", {"store": store}) or 0) >= 1
        assert value("rmq_schedule_late_seconds", {"store": store}) == 4.0
        assert value("rmq_schedule_pending_messages", {"store": store}) == 3
        for _ in range(3):
            metrics.after_pass(redeliverer, redeliverer.run_pass())
        assert value("rmq_schedule_delivered_messages_total", {"store": store}) == 4
        assert value("rmq_schedule_late_messages", {"store": store}) == 0
        assert value("rmq_schedule_pending_messages", {"store": store}) == 0
        assert value("rmq_schedule_lateness_seconds_sum", {"store": store}) == 16.0
    finally:
        redeliverer.close()


class _Gateway(http.server.BaseHTTPRequestHandler):
    """A Pushgateway's push API: PUT /metrics/job/<job>[/<label>/<value>...]."""

    pushes: list[tuple[str, str]] = []

    def do_PUT(self) -> None:  # noqa: N802  (the handler's required name)
        body = self.rfile.read(int(self.headers["Content-Length"])).decode("utf-8")
        _Gateway.pushes.append((self.path, body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


def test_schedule_once_pushes_its_final_metrics_to_a_pushgateway(world: DelayWorld) -> None:
    world.put_delayed("orders", b"due", 1)
    world.broker.close()  # the job opens the store itself
    gateway = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    _Gateway.pushes.clear()
    try:
        push_url = f"http://127.0.0.1:{gateway.server_port}"
        argv = ["schedule", "--store", str(world.root), "--once", "--metrics-push", push_url]
        assert main([*argv, *SMALL, "--set", "store.message_delay_level=1s 2s 3s"]) == 0
    finally:
        gateway.shutdown()
        gateway.server_close()
    assert _Gateway.pushes, "nothing was pushed"
    path, body = _Gateway.pushes[-1]
    assert path.startswith("/metrics/job/rmq-schedule/store@base64/")
    samples = _parse(body)
    key = (("store", str(world.root.absolute())),)
    assert samples[("rmq_schedule_delivered_messages_total", key)] == 1


@pytest.mark.parametrize(
    ("option", "value"), [("--metrics-listen", "9106"), ("--metrics-push", "ftp://x")]
)
def test_bad_metrics_settings_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    store = tmp_path / "store"
    MessageStore.open(StoreConfig(root_dir=store, segment_size_bytes=1 << 20)).close()
    assert main(["schedule", "--store", str(store), "--once", option, value, *SMALL]) != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and option.lstrip("-").replace("-", "_") in err, err
