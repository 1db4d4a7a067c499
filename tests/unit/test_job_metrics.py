"""The reput job's metrics without Spark: the lag is the store's durable end against the
position the job published (read when scraped, shared by scrapes within a second), the
per-batch counters, and one-line errors for a bad or busy ``--metrics-listen`` before any
Spark session starts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rmq_spark.cli.main import main
from rmq_spark.clock import ManualClock
from rmq_spark.errors import ConfigError
from rmq_spark.spark.job_metrics import LAG_REUSE_MS, JobMetrics, ReputMetrics
from rmq_spark.spark.reput import BatchReport
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest
from rmq_spark.store.reader_progress import publish_reader_progress

SMALL = ["--set", "store.segment_size_bytes=1048576"]


def _store(root: Path, clock: ManualClock, count: int) -> list[int]:
    """A store of ``count`` messages stored 1 s apart; their physical offsets."""
    offsets = []
    with MessageStore.open(StoreConfig(root_dir=root, segment_size_bytes=1 << 20), clock) as store:
        for i in range(count):
            offsets.append(store.put(PutRequest("orders", b"m%d" % i)).physical_offset)
            clock.advance(1000)
        offsets.append(store.max_offset)
    return offsets


def test_the_lag_is_the_log_past_the_published_position(tmp_path: Path) -> None:
    clock = ManualClock()
    offsets = _store(tmp_path / "store", clock, 5)
    store = str((tmp_path / "store").absolute())
    config = ReputConfig(tables_dir=tmp_path / "tables")
    job = JobMetrics("rmq-reput", grouping={})
    metrics = ReputMetrics(job, [store], config, clock)
    value = job.registry.get_sample_value
    labels = {"store": store, "tables": str((tmp_path / "tables").absolute())}
    assert value("rmq_reput_lag_messages", labels) == 5  # nothing published: from the start
    assert value("rmq_reput_lag_seconds", labels) == 5.0  # the first was stored 5 s ago
    assert value("rmq_reput_batches_total", labels) == 0

    publish_reader_progress(store, config.reader_name, offsets[3], clock.now_ms())
    assert value("rmq_reput_lag_messages", labels) == 5  # within a second: the last walk's
    clock.advance(LAG_REUSE_MS)
    assert value("rmq_reput_lag_messages", labels) == 2
    assert value("rmq_reput_lag_bytes", labels) == offsets[5] - offsets[3]
    assert value("rmq_reput_lag_seconds", labels) == 3.0
    assert value("rmq_reput_committed_offset_bytes", labels) == offsets[3]
    assert value("rmq_reput_log_end_offset_bytes", labels) == offsets[5]
    assert value("rmq_reput_lag_messages_exact", labels) == 1

    lag = metrics.lags()[store]
    report = BatchReport(
        batch_id=0, message_count=3, log_bytes=offsets[3], start_offset=0,
        end_offset=offsets[3], row_counts={"consume_queue": 3, "message_index": 7}, lag=lag,
        stats_ms=5.0, write_ms=245.0,
    )  # fmt: skip
    metrics.on_batch(report)
    assert value("rmq_reput_batches_total", labels) == 1
    assert value("rmq_reput_rows_written_total", {**labels, "table": "message_index"}) == 7
    assert value("rmq_reput_rows_written_total", {**labels, "table": "messages"}) == 3
    assert value("rmq_reput_log_bytes_total", labels) == offsets[3]
    assert value("rmq_reput_batch_duration_seconds_sum", labels) == 0.25
    assert value("rmq_reput_batch_duration_seconds_bucket", {**labels, "le": "0.25"}) == 1


def test_a_busy_port_is_one_config_error_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        job = JobMetrics("rmq-reput", listen=f"127.0.0.1:{port}", grouping={})
        with pytest.raises(
            ConfigError, match=f"^metrics_listen: cannot serve metrics on 127.0.0.1:{port}"
        ):
            job.start()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--metrics-listen", "9106"], "reput.metrics_listen: metrics_listen: expected host:port"),
        (["--metrics-push", "ftp://gw"], "reput.metrics_push_url: metrics_push_url: expected"),
    ],
)
def test_bad_reput_metrics_options_fail_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    _store(tmp_path / "store", ManualClock(), 1)
    args = ["reput", "--store", str(tmp_path / "store"), "--tables", str(tmp_path / "t")]
    assert main([*args, *argv, *SMALL]) != 0
    err = capsys.readouterr().err.strip()
    assert expected in err and "\n" not in err, err
    assert not (tmp_path / "t").exists()  # refused before any table or session


def test_a_busy_reput_metrics_port_fails_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _store(tmp_path / "store", ManualClock(), 1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        args = ["reput", "--store", str(tmp_path / "store"), "--tables", str(tmp_path / "t")]
        assert main([*args, "--metrics-listen", listen, *SMALL]) != 0
    err = capsys.readouterr().err.strip()
    assert f"cannot serve metrics on {listen}" in err and "\n" not in err, err
    assert not (tmp_path / "t").exists()


def test_a_job_over_a_cluster_names_each_stores_broker(tmp_path: Path) -> None:
    from rmq_spark.cli.reput_command import reput_metrics

    stores = [tmp_path / "a", tmp_path / "b"]
    for root in stores:
        _store(root, ManualClock(), 1)
    brokers = {str(stores[0].absolute()): "bk-a", str(stores[1].absolute()): "bk-b"}
    config = ReputConfig(tables_dir=tmp_path / "tables", metrics_push_url="http://127.0.0.1:9")
    metrics = reput_metrics(config, stores, brokers)
    value = metrics._metrics.registry.get_sample_value
    for store, broker in brokers.items():
        assert value("rmq_reput_store_info", {"store": store, "broker": broker}) == 1
    assert (
        value("rmq_reput_store_info", {"store": str(stores[0].absolute()), "broker": "bk-b"})
        is None
    )
    one_store = reput_metrics(config, stores[:1])  # not from a cluster: no info series
    assert (
        one_store._metrics.registry.get_sample_value(
            "rmq_reput_store_info", {"store": str(stores[0].absolute()), "broker": "bk-a"}
        )
        is None
    )
    metrics.stop()
    one_store.stop()
