"""The source reads stores written by Apache RocketMQ's own DefaultMessageStore (5.3.3 and
4.9.8, through the Java harness of rmq_spark.interop): closed stores whose checkpoint may hold
0 at confirmPhyOffset, read up to their last valid record."""

from __future__ import annotations

import base64
import struct

import pyarrow as pa
import pytest

from rmq_spark.errors import EnvironmentCheckError
from rmq_spark.interop import ROCKETMQ_4, ROCKETMQ_5, build_harness
from rmq_spark.spark import planner
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.source import RocketMQBatchReader
from rmq_spark.store.layout import (
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rmq_spark.store.message import HostAddress
from rmq_spark.store.properties import parse_properties
from rmq_spark.store.view import StoreView

HIDDEN_TYPES = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)

pytestmark = pytest.mark.slow

MESSAGE_COUNT = 100
SEGMENT_BYTES = 64 * 1024


@pytest.fixture(scope="module", params=[ROCKETMQ_5, ROCKETMQ_4], ids=["rocketmq5", "rocketmq4"])
def java_store(request, tmp_path_factory):
    try:
        harness = build_harness(request.param)
    except EnvironmentCheckError as err:
        pytest.fail(f"the RocketMQ interop harness cannot be built: {err}", pytrace=False)
    root = tmp_path_factory.mktemp("java-store")
    lines = harness.write_store(root, MESSAGE_COUNT, SEGMENT_BYTES)
    puts = [line for line in lines if line["event"] == "put"]
    return root, puts


def test_batch_read_of_a_rocketmq_store_equals_what_rocketmq_put(java_store):
    root, puts = java_store
    view = StoreView.open(root)
    assert not view.broker_open
    confirm = struct.unpack(">q", (root / "checkpoint").read_bytes()[32:40])[0]
    end = planner.readable_end(view)
    assert end == max(p["physicalOffset"] + p["size"] for p in puts)
    assert confirm in (0, end) or confirm < end  # whatever RocketMQ left there is not trusted

    def read_rows(isolation: str) -> list[dict]:
        options = {"path": str(root), "maxBytesPerPartition": "20000", "isolation": isolation}
        reader = RocketMQBatchReader(parse_options(options, streaming=False))
        partitions = reader.partitions()
        assert len(partitions) > 3
        return pa.Table.from_batches([b for p in partitions for b in reader.read(p)]).to_pylist()

    # The default (read_committed) leaves out exactly the prepared and rolled-back records.
    prepared_or_rolled_back = {
        p["physicalOffset"] for p in puts if p["sysFlag"] & TRANSACTION_MASK in HIDDEN_TYPES
    }
    assert prepared_or_rolled_back, "the harness writes a prepared transaction record"
    committed = {row["physical_offset"] for row in read_rows("read_committed")}
    assert committed == {p["physicalOffset"] for p in puts} - prepared_or_rolled_back
    rows = read_rows("read_uncommitted")
    assert len(rows) == len(puts)
    for row, put in zip(rows, puts, strict=True):
        label = f"put #{put['index']} at {put['physicalOffset']}"
        assert row["physical_offset"] == put["physicalOffset"], label
        assert row["total_size"] == put["size"], label
        assert row["topic"] == put["topic"], label
        assert row["queue_id"] == put["queueId"], label
        assert row["sys_flag"] == put["sysFlag"], label
        assert row["body"] == base64.b64decode(put["body"]), label
        assert row["body_crc"] == put["bodyCrc"], label
        assert row["msg_id"] == put["msgId"], label
        assert HostAddress.parse(row["store_host"]) == HostAddress.parse(put["storeHost"]), label
        assert HostAddress.parse(row["born_host"]) == HostAddress.parse(put["bornHost"]), label
        assert dict(row["properties"]) == parse_properties(put["propertiesString"]), label
        assert row["store_timestamp"].timestamp() * 1000 == pytest.approx(put["storeTimestamp"])


_HOLD_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
print("locked", flush=True)
sys.stdin.read()
"""


def test_dump_and_verify_read_a_crashed_or_running_rocketmq_store_whole(
    java_store, tmp_path, capsys
):
    import shutil
    import subprocess
    import sys

    from rmq_spark.cli.store_commands import main

    source, puts = java_store
    root = tmp_path / "store"
    shutil.copytree(source, root)
    # What a crash leaves: `abort`, and RocketMQ's preallocated (all-zero) next file.
    (root / "abort").touch()
    last = max(p for p in (root / "commitlog").iterdir() if p.name.isdigit())
    next_base = int(last.name) + last.stat().st_size
    (root / "commitlog" / f"{next_base:020d}").write_bytes(bytes(SEGMENT_BYTES))

    def check() -> None:
        assert main(["verify", "--store", str(root)]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"OK {len(puts)} records"), out
        assert main(["dump", "--store", str(root)]) == 0
        assert len(capsys.readouterr().out.splitlines()) == len(puts)

    check()  # crashed: nobody holds the lock
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(root / "lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        assert StoreView.open(root).broker_open
        check()  # running: a RocketMQ broker holds <store>/lock
    finally:
        holder.communicate("")
