"""``--py-files`` for the streaming source's runner on the driver.

Spark's driver starts a Python process per stream (``python_streaming_source_runner``) and
tells it where ``--py-files`` are as ``<SparkFiles root>/streaming_job/<file>``
(``PythonStreamingSourceRunner`` passes the job artifact id ``streaming_job``), a directory no
one fills: the runner cannot import rmq_spark unless ``PYTHONPATH`` also names the zip. The
planner workers that build the data source first (``load()``) do see them, at
``<SparkFiles root>/<file>``: from there this links each one into ``streaming_job/``, so
``--py-files`` (``spark.submit.pyFiles``) is enough.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

__all__ = ["STREAMING_JOB_DIR", "expose_py_files_to_stream_runner"]

log = logging.getLogger("rmq_spark.spark")

STREAMING_JOB_DIR = "streaming_job"  # PythonStreamingSourceRunner's job artifact id


def expose_py_files_to_stream_runner() -> list[Path]:
    """In a Spark Python worker, link every ``--py-files`` entry of ``sys.path`` (a file
    directly under the SparkFiles root) into ``<root>/streaming_job/``; returns the links
    made. Elsewhere (the driver's own Python, tests) does nothing."""
    from pyspark.files import SparkFiles

    root_text = SparkFiles._root_directory
    if not root_text or not SparkFiles._is_running_on_worker:
        return []
    root = Path(root_text)
    made = []
    for entry in map(Path, sys.path):
        if entry.parent != root or not entry.is_file():
            continue
        link = root / STREAMING_JOB_DIR / entry.name
        try:
            link.parent.mkdir(exist_ok=True)
            os.symlink(entry, link)
        except FileExistsError:  # an earlier query's, or a concurrent planner's
            continue
        except OSError as err:
            log.warning("cannot expose %s to the streaming source runner: %s", entry, err)
            continue
        made.append(link)
        log.debug("exposed %s to the streaming source runner as %s", entry, link)
    return made
