"""What the stream's planning process imports (issue 33's catch-up).

Every streaming query starts a fresh Python process for its source (PySpark's
``python_streaming_source_runner``) and plans its batches there; the query's first trigger
waits for that process's imports. The planning calls need neither pandas (pulled in by any
``pa.array`` call), the broker's gRPC client, the cluster reader nor the sink: importing
them cost ~250 ms of every query's start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from source_support import LogWriter, make_record

_PLAN = """
import json, sys
import pyspark.sql.streaming.python_streaming_source_runner  # what the runner imports first
from pyspark.sql.streaming.datasource import ReadMaxBytes

before = set(sys.modules)
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.source import RocketMQDataSource

source = RocketMQDataSource({"path": sys.argv[1], "startingOffsets": "earliest"})
reader = source.streamReader(source.schema())
start = reader.initialOffset()
reader.prepareForTriggerAvailableNow()
end = reader.latestOffset(start, ReadMaxBytes(1 << 20))
reader.reportLatestOffset()
partitions = reader.partitions(start, end)
print(json.dumps({"end": end, "partitions": len(partitions),
                  "imported": sorted(set(sys.modules) - before)}))
"""

UNWANTED = (
    "pandas",
    "rmq_spark.broker.offset_client",
    "rmq_spark.broker.proto",
    "rmq_spark.spark.cluster_reader",
    "rmq_spark.spark.sink",
)


def test_planning_a_stream_imports_no_pandas_broker_client_cluster_reader_or_sink(tmp_path):
    log = LogWriter(tmp_path / "store")
    log.extend(make_record(i) for i in range(20))
    log.set_confirm()
    result = subprocess.run(
        [sys.executable, "-c", _PLAN, str(log.store_dir)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    planned = json.loads(result.stdout.strip().splitlines()[-1])
    assert planned["end"] == {"physical_offset": log.end_offset}
    assert planned["partitions"] >= 1
    heavy = [m for m in planned["imported"] if m.split(".")[0] == "pandas" or m in UNWANTED]
    heavy += [m for m in planned["imported"] if m.startswith(tuple(u + "." for u in UNWANTED))]
    assert sorted(set(heavy)) == []
