"""``reput_start.warm_python_workers``: what it runs on each Python worker leaves nothing for
the first batch to import; an import met there (pandas, pulled in by pyarrow's first
conversion from numpy) is half a second of every worker's first batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]

# A fresh process: the warm-up's function, then one batch's files written as a worker
# writes them; prints the modules the writing imported.
_FIRST_BATCH = """
import sys
from pathlib import Path
from rmq_spark.spark.reput_start import _import_writer_modules
from rmq_spark.spark import planner
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.partitions import open_view, plan
from rmq_spark.spark.reput_files import ReputFileTask, write_partition_files
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

_import_writer_modules(None)
store, tables = Path(sys.argv[1]), Path(sys.argv[2])
with MessageStore.open(StoreConfig(root_dir=store)) as opened:
    opened.put_batch([PutRequest("t", b"b%d" % i, tags="a", keys=(f"k{i}",)) for i in range(50)])
options = parse_options({"path": str(store)}, streaming=True)
view = open_view(options)
partitions = plan(view, options, view.min_offset, planner.readable_end(view), [])
floors = {"messages": 0, "message_index": 0, "consume_queue": 0}
for name in floors:
    (tables / name).mkdir(parents=True)
task = ReputFileTask(options, str(tables), floors, (1000,))
known = set(sys.modules)
written = sum(write_partition_files(task, partition).messages for partition in partitions)
print(written, sorted(set(sys.modules) - known)[:5])
"""


def test_after_the_warm_up_a_batch_s_files_import_nothing(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _FIRST_BATCH, str(tmp_path / "store"), str(tmp_path / "tables")],
        cwd=_REPO, env={**os.environ, "PYTHONPATH": str(_REPO)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "50 []"
