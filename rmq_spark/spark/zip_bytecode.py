"""Bytecode inside Spark's Python zips, so that Spark's Python processes do not compile PySpark.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's source zip first on the path
of every Python process it starts (``PythonUtils.sparkPythonPath``), ahead of the installed
package. A zip as pip installs it holds sources only, and ``zipimport`` never writes
bytecode, so each process compiles every PySpark module it imports: half a second of the
stream source's process, which every streaming query starts before its first trigger (the
reput's catch-up among them), and of each Python worker daemon.

``add_bytecode`` rewrites such a zip with a checked-hash ``.pyc`` beside each ``.py``:
``zipimport`` tries ``.pyc`` first and uses it only while its source hash matches the
``.py`` in the zip and its magic number is the running interpreter's; anything else falls
back to the source, as before. ``make setup`` runs it over the venv's PySpark
(``python -m rmq_spark.spark.zip_bytecode``); a zip that has its bytecode is left alone.
Owns the rewrite; not Spark's path, nor which interpreter the workers run.
"""

from __future__ import annotations

import argparse
import logging
import os
import py_compile
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = ["add_bytecode", "main", "spark_python_zips"]

log = logging.getLogger("rmq_spark.zip_bytecode")


def spark_python_zips(spark_home: Path) -> list[Path]:
    """The zips Spark puts on its Python processes' path: ``python/lib/*.zip``."""
    return sorted((spark_home / "python" / "lib").glob("*.zip"))


def _bytecode(source: bytes, shown_path: str, scratch: Path) -> bytes | None:
    """A checked-hash ``.pyc`` of ``source`` whose tracebacks name ``shown_path`` (what
    ``zipimport`` names a module compiled from the zip); ``None`` if it does not compile."""
    script, compiled = scratch / "module.py", scratch / "module.pyc"
    script.write_bytes(source)
    try:
        py_compile.compile(
            str(script),
            cfile=str(compiled),
            dfile=shown_path,
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )
    except py_compile.PyCompileError as err:
        log.debug("zip bytecode: %s does not compile: %s", shown_path, err.msg)
        return None
    return compiled.read_bytes()


def add_bytecode(archive: Path) -> int:
    """Rewrite ``archive`` with a ``.pyc`` beside each ``.py`` that has none; how many were
    added (0: nothing to do, the file is untouched). The new zip replaces the old one
    atomically (a process importing from it meanwhile sees one or the other)."""
    with zipfile.ZipFile(archive) as source:
        names = set(source.namelist())
        missing = {n for n in names if n.endswith(".py") and f"{n}c" not in names}
        if not missing:
            return 0
        handle, temporary = tempfile.mkstemp(prefix=f".{archive.name}.", dir=archive.parent)
        os.close(handle)
        added = 0
        try:
            with (
                zipfile.ZipFile(temporary, "w") as rewritten,
                tempfile.TemporaryDirectory() as scratch,
            ):
                for info in source.infolist():
                    data = source.read(info)
                    rewritten.writestr(info, data)
                    if info.filename not in missing:
                        continue
                    pyc = _bytecode(data, f"{archive}/{info.filename}", Path(scratch))
                    if pyc is not None:
                        entry = zipfile.ZipInfo(f"{info.filename}c", info.date_time)
                        entry.compress_type = zipfile.ZIP_DEFLATED
                        rewritten.writestr(entry, pyc)
                        added += 1
            os.chmod(temporary, archive.stat().st_mode & 0o777)
            os.replace(temporary, archive)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    return added


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rmq_spark.spark.zip_bytecode",
        description=(
            "Add bytecode to the Python zips Spark puts on its workers' path (pyspark.zip, "
            "py4j), so that each Python process Spark starts stops compiling PySpark "
            "(~0.5 s of every streaming query's start). Safe to run again: a zip with its "
            "bytecode is left alone; a .pyc is used only while it matches its source."
        ),
    )
    parser.add_argument(
        "zips",
        nargs="*",
        type=Path,
        help="zips to rewrite (default: the installed PySpark's python/lib/*.zip)",
    )
    args = parser.parse_args(argv)
    archives = args.zips
    if not archives:
        import pyspark

        archives = spark_python_zips(Path(pyspark.__file__).parent)
    for archive in archives:
        added = add_bytecode(archive)
        print(f"{archive}: {added} modules compiled" if added else f"{archive}: up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
