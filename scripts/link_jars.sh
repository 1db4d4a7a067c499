#!/usr/bin/env bash
# Link the cached Delta jars (jars/) into the venv's pyspark/jars folder, so that a plain
# `spark-submit jobs/x.py` from the venv has Delta on the driver's classpath at JVM start
# (spark.jars set from Python code comes too late for the driver under spark-submit).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
target=$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
while read -r jar; do
  [ -n "$jar" ] || continue
  ln -sf "$PWD/jars/$jar" "$target/$jar"
done < jars/manifest.txt
echo "delta jars: linked into $target"
