"""A running ``rmq-spark reput --metrics-listen`` serves its lag to Prometheus: a real reput
process over a small store, its ``/metrics`` fetched over HTTP and parsed with
``prometheus_client``'s text parser, and scraped by a real Prometheus server (Debian's,
``scripts/ensure_prometheus.sh``) whose query API then answers with the job's figures. The lag
covers the messages not in the tables yet, falls to 0 once a batch committed them, and rises
again when more are stored while the job runs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(url: str) -> Samples:
    """Every sample of the endpoint: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        text = response.read().decode("utf-8")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@contextlib.contextmanager
def prometheus_scraping(target: str, work: Path) -> Iterator[str]:
    """A Prometheus server scraping ``target`` (host:port) every second; yields its query URL."""
    binary = subprocess.run(
        [str(REPO / "scripts" / "ensure_prometheus.sh")],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout.strip().splitlines()[-1]  # fmt: skip
    work.mkdir()
    config = work / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs: [{{job_name: reput, static_configs: [{{targets: ['{target}']}}]}}]\n"
    )
    port = _free_port()
    with (work / "prometheus.log").open("wb") as log:
        server = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}/api/v1/query"
    finally:
        server.terminate()
        server.wait(timeout=60)


def prometheus_value(query_url: str, query: str) -> float | None:
    """The one value Prometheus answers ``query`` with, ``None`` before it has one."""
    url = f"{query_url}?{urllib.parse.urlencode({'query': query})}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            result = json.loads(response.read())["data"]["result"]
    except (urllib.error.URLError, ConnectionError):
        return None
    return float(result[0]["value"][1]) if len(result) == 1 else None


def _put(store: Path, count: int, start: int) -> None:
    with MessageStore.open(StoreConfig(root_dir=store, segment_size_bytes=1 << 20)) as opened:
        opened.put_batch([PutRequest("orders", b"m%d" % i) for i in range(start, start + count)])


def _wait(
    url: str, job: subprocess.Popen[bytes], out: Path, ready: Callable[[Samples], bool]
) -> Samples:
    deadline = time.monotonic() + 300  # a JVM start on a busy machine; bounded
    while True:
        assert job.poll() is None, out.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, out.read_text(errors="replace")[-3000:]
        try:
            samples = scrape(url)
        except (urllib.error.URLError, ConnectionError):
            samples = {}
        if samples and ready(samples):
            return samples
        time.sleep(0.5)


def test_a_running_reput_job_serves_its_lag_rows_and_batch_times(tmp_path: Path) -> None:
    store, tables = tmp_path / "store", tmp_path / "tables"
    _put(store, 25, 0)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    out = tmp_path / "out.txt"
    with out.open("wb") as sink:
        job = subprocess.Popen(
            [sys.executable, "-m", "rmq_spark.cli.main", "reput", "--store", str(store),
             "--tables", str(tables), "--trigger", "1s", "--metrics-listen", f"127.0.0.1:{port}",
             "--set", "spark.master=local[1]"],
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
            env=dict(os.environ, PYSPARK_PYTHON=sys.executable), cwd=tmp_path,
        )  # fmt: skip
    key = (("store", str(store.absolute())), ("tables", str(tables.absolute())))

    def value(samples: Samples, name: str, *extra: tuple[str, str]) -> float | None:
        return samples.get((name, tuple(sorted(key + extra))))

    scraping = contextlib.ExitStack()
    try:
        query_url = scraping.enter_context(
            prometheus_scraping(f"127.0.0.1:{port}", tmp_path / "prometheus")
        )
        first = _wait(url, job, out, lambda s: value(s, "rmq_reput_lag_messages") is not None)
        if value(first, "rmq_reput_batches_total") == 0:  # scraped before the first batch
            assert value(first, "rmq_reput_lag_messages") == 25
            assert value(first, "rmq_reput_lag_bytes") == value(
                first, "rmq_reput_log_end_offset_bytes"
            )
        caught_up = _wait(  # the lag is 0 once published, the counters a moment after
            url,
            job,
            out,
            lambda s: (
                value(s, "rmq_reput_lag_messages") == 0
                and value(s, "rmq_reput_rows_written_total", ("table", "messages")) == 25
            ),
        )
        assert value(caught_up, "rmq_reput_lag_bytes") == 0
        assert value(caught_up, "rmq_reput_lag_seconds") == 0
        assert value(caught_up, "rmq_reput_lag_messages_exact") == 1
        end = value(caught_up, "rmq_reput_log_end_offset_bytes")
        assert end and value(caught_up, "rmq_reput_committed_offset_bytes") == end
        assert value(caught_up, "rmq_reput_rows_written_total", ("table", "messages")) == 25
        assert value(caught_up, "rmq_reput_rows_written_total", ("table", "consume_queue")) == 25
        assert value(caught_up, "rmq_reput_log_bytes_total") == end
        batches = value(caught_up, "rmq_reput_batches_total") or 0
        assert batches >= 1
        assert value(caught_up, "rmq_reput_batch_duration_seconds_count") == batches
        assert ("process_cpu_seconds_total", ()) in caught_up

        _put(store, 10, 25)  # stored while the job runs: committed by a later batch
        later = _wait(  # the lag is read at most once a second: it may trail the counters
            url,
            job,
            out,
            lambda s: (
                value(s, "rmq_reput_rows_written_total", ("table", "messages")) == 35
                and (value(s, "rmq_reput_log_end_offset_bytes") or 0) > end
                and value(s, "rmq_reput_lag_messages") == 0
            ),
        )
        assert value(later, "rmq_reput_committed_offset_bytes") == value(
            later, "rmq_reput_log_end_offset_bytes"
        )
        rows = 'rmq_reput_rows_written_total{job="reput",table="messages"}'
        lag = 'rmq_reput_lag_messages{job="reput"}'
        deadline = time.monotonic() + 120
        # What Prometheus scraped and stored (the lag, read at most once a second, may trail
        # the rows by a scrape).
        while (prometheus_value(query_url, rows), prometheus_value(query_url, lag)) != (35, 0):
            log = tmp_path / "prometheus" / "prometheus.log"
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        os.killpg(job.pid, signal.SIGINT)
        code = job.wait(timeout=120)
    finally:
        scraping.close()
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert code == 0, out.read_text(errors="replace")[-3000:]
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        scrape(url)  # the endpoint went with the job
