#!/usr/bin/env bash
# Build build/rmq-spark-hadoop-fs.jar from jvm/hadoop-fs: Hadoop's local file system without
# its forks of `chmod` and `readlink` (see ForklessRawLocalFileSystem), compiled against the
# Hadoop API jar pyspark ships, and link it into pyspark/jars as link_jars.sh links Delta's
# (a spark-submit driver and a standalone cluster started from this venv have it at JVM
# start). Without a JDK's javac it only warns: sessions then keep Hadoop's own file system.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
JAR=build/rmq-spark-hadoop-fs.jar
if ! command -v javac >/dev/null 2>&1; then
  echo "warning: no javac: Spark keeps Hadoop's local file system (a fork per file it writes)" >&2
  exit 0
fi
pyspark_jars=$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
api=$(ls "$pyspark_jars"/hadoop-client-api-*.jar | head -n 1)
classes=build/hadoop-fs-classes
rm -rf "$classes"
mkdir -p "$classes"
javac --release 17 -Xlint:all -Werror -cp "$api" -d "$classes" $(find jvm/hadoop-fs -name '*.java')
jar --create --file "$JAR.tmp" -C "$classes" .
mv "$JAR.tmp" "$JAR"
ln -sf "$PWD/$JAR" "$pyspark_jars/$(basename "$JAR")"
echo "hadoop fs: $JAR, linked into $pyspark_jars"
