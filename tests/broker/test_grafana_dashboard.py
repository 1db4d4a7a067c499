"""``docs/grafana/rmq-spark.json`` names only metrics that exist: every metric its panels'
and variables' expressions name is a sample in a real scrape of a broker (with a producer
and a consumer group at work), of a running schedule job, or of the reput job's registry
(``ReputMetrics``, the one ``rmq-spark reput --metrics-listen`` serves: that process is
scraped in tests/reput/test_reput_metrics.py; here without starting Spark)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from broker_harness import BrokerProcess
from prometheus_client.parser import text_string_to_metric_families

from rmq_spark.spark.job_metrics import JobMetrics, ReputMetrics
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

pytestmark = pytest.mark.slow

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "rmq-spark.json"
METRIC = re.compile(r"\b(?:rmq|rocketmq|process)_[A-Za-z0-9_:]+")
_TOPIC, _GROUP = "DashOrders", "dash-group"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _names(url: str) -> set[str]:
    """The sample names of one scrape (``_bucket``, ``_total``... as Prometheus stores them)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode("utf-8")
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def _expressions(node: Any) -> Iterator[str]:
    """Every PromQL text of the dashboard: targets' ``expr``, variables' ``definition``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            else:
                yield from _expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from _expressions(item)


def test_every_panel_queries_at_least_one_metric() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels
    for panel in panels:
        exprs = [target["expr"] for target in panel["targets"]]
        assert exprs and all(METRIC.search(expr) for expr in exprs), panel["title"]


def _broker_names(broker: BrokerProcess, url: str, rocketmq: ModuleType, producer: Any) -> set[str]:
    for i in range(3):
        message = rocketmq.Message()
        message.topic = _TOPIC
        message.body = b"order %d" % i
        producer.send(message)
    config = rocketmq.ClientConfiguration(broker.address, rocketmq.Credentials(), request_timeout=5)
    consumer = rocketmq.SimpleConsumer(config, _GROUP, {_TOPIC: rocketmq.FilterExpression("*")})
    consumer.startup()
    try:
        got: list[Any] = []
        end = time.monotonic() + 30
        while len(got) < 3:
            assert time.monotonic() < end, f"received {len(got)} of 3"
            got += consumer.receive(32, 10)
        consumer.ack(got[0])
        return _names(url)
    finally:
        consumer.shutdown()


def _schedule_names(tmp_path: Path) -> set[str]:
    store = tmp_path / "schedule-store"
    with MessageStore.open(StoreConfig(root_dir=store, segment_size_bytes=1 << 20)) as opened:
        opened.put(PutRequest("orders", b"later", properties={"DELAY": "1"}))
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    job = subprocess.Popen(
        [sys.executable, "-m", "rmq_spark.cli.main", "schedule", "--store", str(store),
         "--trigger", "200ms", "--metrics-listen", f"127.0.0.1:{port}",
         "--set", "store.segment_size_bytes=1048576"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            assert job.poll() is None, "the schedule job ended"
            assert time.monotonic() < deadline, "the schedule job never served a pass"
            try:
                names = _names(url)
            except (urllib.error.URLError, ConnectionError):
                names = set()
            if "rmq_schedule_pending_messages" in names:
                return names
            time.sleep(0.3)
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=60)


def _reput_names(tmp_path: Path) -> set[str]:
    store = tmp_path / "reput-store"
    MessageStore.open(StoreConfig(root_dir=store, segment_size_bytes=1 << 20)).close()
    job = JobMetrics("rmq-reput", listen="127.0.0.1:0", grouping={})
    metrics = ReputMetrics(job, [str(store.absolute())], ReputConfig(tables_dir=tmp_path / "t"))
    job.start()
    try:
        assert job.server is not None
        return _names(job.server.url)
    finally:
        metrics.stop()


def test_every_metric_the_dashboard_names_is_served(
    tmp_path: Path,
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    named = {
        m for expr in _expressions(json.loads(DASHBOARD.read_text())) for m in METRIC.findall(expr)
    }
    assert len(named) >= 20
    port = _free_port()
    broker = broker_factory(f"broker.metrics_listen=127.0.0.1:{port}")
    producer = official_producer(broker.address, (_TOPIC,))
    served = _broker_names(broker, f"http://127.0.0.1:{port}/metrics", rocketmq, producer)
    served |= _schedule_names(tmp_path)
    served |= _reput_names(tmp_path)
    assert sorted(named - served) == []
