"""Bytecode in Spark's Python zips (rmq_spark.spark.zip_bytecode, run by ``make setup``)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark

from rmq_spark.spark.zip_bytecode import add_bytecode, main, spark_python_zips

_MODULE = b"def fail():\n    raise ValueError('from the zip')\n\nANSWER = 42\n"


def _zip(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def _import(archive: Path, code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(archive), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout + result.stderr


def test_modules_load_from_the_added_bytecode_and_tracebacks_name_the_source(tmp_path):
    archive = _zip(tmp_path / "lib.zip", {"pkg/__init__.py": b"", "pkg/mod.py": _MODULE})
    assert add_bytecode(archive) == 2
    with zipfile.ZipFile(archive) as rewritten:
        assert {"pkg/__init__.pyc", "pkg/mod.pyc", "pkg/mod.py"} <= set(rewritten.namelist())
    shown = _import(
        archive,
        "import traceback, pkg.mod as m\nprint(m.__file__, m.ANSWER)\n"
        "try:\n    m.fail()\nexcept ValueError:\n    traceback.print_exc()",
    )
    assert f"{archive}/pkg/mod.pyc 42" in shown
    assert f'File "{archive}/pkg/mod.py", line 2, in fail' in shown
    assert "raise ValueError('from the zip')" in shown  # the source line, read from the zip


def test_a_zip_with_its_bytecode_is_left_alone(tmp_path):
    archive = _zip(tmp_path / "lib.zip", {"mod.py": _MODULE})
    add_bytecode(archive)
    before = archive.stat()
    assert add_bytecode(archive) == 0
    assert archive.stat().st_mtime_ns == before.st_mtime_ns


def test_bytecode_that_no_longer_matches_its_source_is_not_used(tmp_path):
    """A .pyc is checked against the .py beside it: a changed source wins."""
    archive = _zip(tmp_path / "lib.zip", {"mod.py": _MODULE})
    add_bytecode(archive)
    with zipfile.ZipFile(archive) as compiled:
        pyc = compiled.read("mod.pyc")
    changed = _zip(tmp_path / "changed.zip", {"mod.py": b"ANSWER = 7\n", "mod.pyc": pyc})
    assert _import(changed, "import mod; print(mod.ANSWER)").strip() == "7"


def test_a_source_that_does_not_compile_gets_no_bytecode(tmp_path):
    archive = _zip(tmp_path / "lib.zip", {"good.py": _MODULE, "bad.py": b"def (:\n"})
    assert add_bytecode(archive) == 1
    with zipfile.ZipFile(archive) as rewritten:
        assert "bad.pyc" not in rewritten.namelist()
    assert main([str(archive)]) == 0


def test_the_installed_pyspark_zips_carry_their_bytecode():
    """``make setup`` compiled them: Spark's Python processes import PySpark from there."""
    zips = spark_python_zips(Path(pyspark.__file__).parent)
    assert [z.name for z in zips if z.name == "pyspark.zip"] == ["pyspark.zip"]
    for archive in zips:
        with zipfile.ZipFile(archive) as installed:
            names = set(installed.namelist())
        sources = {n for n in names if n.endswith(".py")}
        assert sources and {f"{n}c" for n in sources} <= names, archive
