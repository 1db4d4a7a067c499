"""``make bytecode`` (part of ``make setup``): our package's modules load from bytecode in a
process that never writes any (``PYTHONDONTWRITEBYTECODE``, set by many containers), as the
CLI and every Python process Spark starts are on such a machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]
_PACKAGES = ("rmq_spark", "pyspark_rocketmq")

# Counts the modules of ours that the import system compiles from source in this process.
_COMPILED_AT_IMPORT = """
import importlib.machinery as machinery
import sys
ours = tuple(sys.argv[1:])
compiled = []
original = machinery.SourceFileLoader.source_to_code
def spy(self, data, path, *args, **kwargs):
    if str(path).startswith(ours):
        compiled.append(str(path))
    return original(self, data, path, *args, **kwargs)
machinery.SourceFileLoader.source_to_code = spy
import pyspark_rocketmq, rmq_spark.cli.main, rmq_spark.spark.source, rmq_spark.broker.server
print(len(compiled), compiled[:3])
"""


def _compiled_at_import() -> str:
    result = subprocess.run(
        [sys.executable, "-c", _COMPILED_AT_IMPORT, *(f"{_REPO / name}/" for name in _PACKAGES)],
        cwd=_REPO,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout.strip()


def test_after_make_bytecode_no_module_of_ours_is_compiled_at_import():
    subprocess.run(
        ["make", "-s", "bytecode"], cwd=_REPO, capture_output=True, timeout=600, check=True
    )
    assert _compiled_at_import() == "0 []"
