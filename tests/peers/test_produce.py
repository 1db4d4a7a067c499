"""Smoke test of bench/peers' produce workload against the rmq-spark broker alone (no JVM).

Every case runs for a second with the official Python client: sends go through, none fails,
the broker's CPU is read, the broker subprocess and its temporary store are gone afterwards,
and the table has one row per case. The RocketMQ side is the same code with another endpoint;
its peer's start and stop are checked in test_rocketmq_peer.py.
"""

from __future__ import annotations

from types import ModuleType

import pytest

pytestmark = pytest.mark.slow


def test_produce_cases_run_against_the_rmq_spark_broker(rocketmq: ModuleType) -> None:
    import produce  # bench/peers is on sys.path (conftest.py)

    args = produce.parse_args(
        ["--systems", "rmq-spark", "--seconds", "1", "--warm-up-seconds", "0.5",
         "--rate", "100", "--rate-seconds", "1", "--burners", "1", "--inflight", "4"]
    )  # fmt: skip
    results = produce.run_produce(rocketmq, produce.ProduceOptions(args))
    cases = results["rmq-spark"]
    assert [case.paced for case in cases] == [False, False, True]
    for case in cases:
        assert case.failed == 0, case.first_error
        assert case.sent > 0 and case.broker_cpu_s > 0
    assert cases[2].sent == 100
    table = produce.produce_table(results)
    assert len(table) == 2 + len(cases)
    assert "2 threads x 4 in flight" in table[3]


def test_bad_systems_is_a_usage_error() -> None:
    import produce

    with pytest.raises(produce.UsageError, match=r"--systems: unknown \['kafka'\]"):
        produce.parse_args(["--systems", "rmq-spark,kafka"])


def test_rmq_spark_broker_stops_completely_when_its_log_cannot_be_kept(tmp_path) -> None:  # noqa: ANN001
    from rmq_spark_broker import RmqSparkBroker

    with RmqSparkBroker(keep_log=tmp_path / "missing-dir" / "broker.log") as broker:
        process, workdir = broker.process, broker.workdir
        assert process is not None and workdir is not None
    assert process.poll() is not None
    assert not workdir.exists()
