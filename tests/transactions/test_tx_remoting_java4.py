"""RocketMQ 4.9.8's ``TransactionMQProducer`` over remoting: the prepared SEND_MESSAGE is a half
message, END_TRANSACTION commits or rolls back, and the broker's CHECK_TRANSACTION_STATE asks
the producer about the half it left UNKNOW, whose checker commits it; each committed message is
stored once in its topic, the rolled-back one never."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_harness import wait_for
from tx_helpers import OP, records_of

_REMOTING_TESTS = str(Path(__file__).resolve().parents[1] / "remoting")
if _REMOTING_TESTS not in sys.path:
    sys.path.insert(0, _REMOTING_TESTS)

from java4 import rocketmq4_jars, run_check  # noqa: E402
from namesrv_harness import Namesrv, start_namesrv  # noqa: E402
from remoting_harness import start_remoting_broker  # noqa: E402

from rmq_spark.envcheck import find_rocketmq_jars  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)"),
]


@pytest.fixture(scope="module")
def tx_namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Namesrv]:
    find_rocketmq_jars()
    started = start_namesrv(tmp_path_factory.mktemp("namesrv") / "work")
    yield started
    started.stop()


def _class_path(classes: Path) -> list[Path]:
    jars = rocketmq4_jars()
    classes.mkdir(parents=True, exist_ok=True)
    source = Path(__file__).parent / "java" / "TxProducer4.java"
    subprocess.run(
        ["javac", "-d", str(classes), "-cp", os.pathsep.join(map(str, jars)), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return [*jars, classes]


def test_a_4x_transaction_producer_commits_rolls_back_and_answers_a_check(
    tx_namesrv: Namesrv, tmp_path: Path
) -> None:
    broker, _ = start_remoting_broker(
        tmp_path / "store", tmp_path / "work", f"broker.namesrv_addr={tx_namesrv.addr}",
        "store.segment_size_bytes=16777216", "broker.transaction_timeout_ms=500",
        "broker.transaction_check_interval_ms=300",
    )  # fmt: skip
    try:
        lines = run_check(
            _class_path(tmp_path / "classes"), "TxProducer4", tmp_path / "home",
            tx_namesrv.addr, "Tx4", "pg-tx4", "commit", "rollback", "unknown",
        )  # fmt: skip
        assert lines[:3] == [
            "SENT commit SEND_OK COMMIT_MESSAGE",
            "SENT rollback SEND_OK ROLLBACK_MESSAGE",
            "SENT unknown SEND_OK UNKNOW",
        ], lines
        assert "CHECK_OK" in lines and "CHECKED unknown" in lines, lines

        def committed() -> list[bytes]:
            return sorted(r.body for r in records_of(broker.store_dir, "Tx4"))

        wait_for(lambda: committed() == [b"commit", b"unknown"], 30, "both commits")
        assert all(r.sys_flag & 0xC == 0x8 for r in records_of(broker.store_dir, "Tx4"))
        assert len(records_of(broker.store_dir, OP)) == 3
    finally:
        broker.kill()
