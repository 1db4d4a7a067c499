"""The processes that only plan a read (Spark's stream source runner, its read planner, the
data source look-up) load neither the decoder nor ``pyarrow.compute``: ~0.1 s of each one's
start, and each streaming query's first trigger waits for them in turn."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]

# A fresh process that plans a micro-batch of a stream and a batch read the way the
# planning processes do (offsets, partitions, lag), and prints what it loaded that it must not.
_PLAN = """
import sys
from pathlib import Path
from pyspark.sql.streaming.datasource import ReadAllAvailable
import pyspark_rocketmq
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.source import RocketMQBatchReader, RocketMQStreamReader
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

store = Path(sys.argv[1])
with MessageStore.open(StoreConfig(root_dir=store, segment_size_bytes=4096)) as opened:
    for i in range(200):  # one put each: several segments
        assert opened.put(PutRequest("t", b"b%d" % i, tags="a", keys=(f"k{i}",))).ok
options = {"path": str(store), "startingOffsets": "earliest", "maxBytesPerPartition": "3000"}
stream = RocketMQStreamReader(parse_options(options, streaming=True))
start = stream.initialOffset()
end = stream.latestOffset(start, ReadAllAvailable())
planned = len(stream.partitions(start, end))
planned += len(RocketMQBatchReader(parse_options(options, streaming=False)).partitions())
stream.latestOffset(end, ReadAllAvailable())
decoder = ("pyarrow.compute", "rmq_spark.spark.columnar", "rmq_spark.spark.columnar_build")
print(planned >= 2, [name for name in decoder if name in sys.modules])
"""


def test_planning_a_read_loads_no_decoder(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _PLAN, str(tmp_path / "store")],
        cwd=_REPO, env={**os.environ, "PYTHONPATH": str(_REPO)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True []"
