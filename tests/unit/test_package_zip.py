"""``scripts/package.py`` (``make package``): the executors' zip (``--py-files``) carries
bytecode, so that a Python process importing our package from it compiles none of it
(``zipimport`` never writes bytecode: without it every process compiles every module)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]

# Counts the modules that zipimport compiles from source in this process, and says where the
# package came from.
_COMPILED_FROM_ZIP = """
import sys, zipimport
compiled = []
original = zipimport._compile_source
def spy(pathname, source):
    compiled.append(pathname)
    return original(pathname, source)
zipimport._compile_source = spy
import pyspark_rocketmq, rmq_spark.spark.source, rmq_spark.spark.reput
print(rmq_spark.__file__.startswith(sys.argv[1]), len(compiled), compiled[:3])
"""


def _package(out_dir: Path) -> Path:
    done = subprocess.run(
        [sys.executable, str(_REPO / "scripts" / "package.py"), str(out_dir)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return Path(done.stdout.strip())


def test_every_module_in_the_package_zip_has_its_bytecode(tmp_path):
    with zipfile.ZipFile(_package(tmp_path)) as archive:
        names = set(archive.namelist())
    sources = {name for name in names if name.endswith(".py")}
    assert "rmq_spark/spark/source.py" in sources
    assert {name for name in sources if f"{name}c" not in names} == set()


def test_a_process_importing_from_the_package_zip_compiles_nothing(tmp_path):
    package = _package(tmp_path / "dist")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(package)}
    done = subprocess.run(
        [sys.executable, "-c", _COMPILED_FROM_ZIP, str(package)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "True 0 []", done.stdout + done.stderr[-2000:]


# In a process whose package comes from the zip: is the readers' CRC loop the native one?
_CRC_LOOP_FROM_ZIP = """
import sys
from rmq_spark.store import crc
print(crc.__file__.startswith(sys.argv[1]), crc.native_slices() is not None)
"""


def test_a_process_importing_from_the_package_zip_has_the_native_crc_loop(tmp_path):
    package = _package(tmp_path / "dist")
    with zipfile.ZipFile(package) as archive:
        assert "rmq_spark/store/libcrc_slices.so" in archive.namelist()
    env = {**os.environ, "PYTHONPATH": str(package), "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", _CRC_LOOP_FROM_ZIP, str(package)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "True True", done.stdout + done.stderr[-2000:]
    assert list(tmp_path.glob("rmq-spark-crc-*")) == []  # the private copy is gone
