"""Set-up of the reput tests."""

from __future__ import annotations

import os
import sys

# Python workers (the rocketmq source's reader) must run this interpreter; the session builder
# does not set spark.pyspark.python yet (reported to the lead).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
