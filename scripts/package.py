"""Build dist/rmq_spark-<version>.zip: the package for Spark executors (``--py-files``).

The executors of a real cluster need ``rmq_spark`` (the source's readers and the reput job's
writers run there); its dependencies (numpy, pyarrow, grpcio, deltalake ...) come from the
workers' Python, as for any PySpark job. Usage: ``python scripts/package.py [OUT_DIR]``;
prints the zip's path.

The zip carries a checked-hash ``.pyc`` beside each module (``zip_bytecode.add_bytecode``):
``zipimport`` never writes bytecode, so without it every Python process an executor starts
would compile each module of ours it imports. An executor whose Python is another version
than the one that built the zip falls back to the sources, as before. It carries the readers'
CRC loop too (``build/native-crc``, when ``make setup`` built it), which an executor of another
machine kind cannot load and replaces with the same checks in Python.
"""

from __future__ import annotations

import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script: the checkout's package, not an installed one

from rmq_spark.spark.zip_bytecode import add_bytecode  # noqa: E402
from rmq_spark.store.crc import BUILT_LIBRARY, PACKAGED_LIBRARY  # noqa: E402

# pyspark_rocketmq: what Spark's look-up of Python data sources finds (format("rocketmq")).
PACKAGES = ("rmq_spark", "pyspark_rocketmq")


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0]) if argv else ROOT / "dist"
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"rmq_spark-{version}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in PACKAGES:
            for path in sorted((ROOT / package).rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    archive.write(path, path.relative_to(ROOT))
        if BUILT_LIBRARY.exists():  # the readers' CRC loop (rmq_spark/store/crc.py)
            archive.write(BUILT_LIBRARY, f"rmq_spark/store/{PACKAGED_LIBRARY}")
    add_bytecode(target)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
