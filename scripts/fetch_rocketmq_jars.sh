#!/usr/bin/env bash
# Fetch Apache RocketMQ's name server and admin tools (scripts/rocketmq-jars.pom.xml) from Maven
# Central once into jars/rocketmq/ (or $RMQ_SPARK_ROCKETMQ_JARS), with a Maven cache in
# ./.cache/m2, and write its manifest.txt. A second run with the jars present does nothing.
# These jars are for `rmq-spark namesrv` / `rmq-spark mqadmin` only, never Spark's classpath.
# ROCKETMQ_JARS_DIR, ROCKETMQ_POM and ROCKETMQ_WHAT fetch another set the same way
# (scripts/fetch_rocketmq4_jars.sh: the 4.x client).
set -euo pipefail
cd "$(dirname "$0")/.."
JARS_DIR=${ROCKETMQ_JARS_DIR:-${RMQ_SPARK_ROCKETMQ_JARS:-jars/rocketmq}}
POM=${ROCKETMQ_POM:-scripts/rocketmq-jars.pom.xml}
WHAT=${ROCKETMQ_WHAT:-rocketmq jars}
STAMP="$JARS_DIR/manifest.txt"
if [ -f "$STAMP" ] && [ "$STAMP" -nt "$POM" ] && while read -r jar; do [ -f "$JARS_DIR/$jar" ] || exit 1; done < "$STAMP"; then
  echo "$WHAT: cached in $JARS_DIR ($(wc -l < "$STAMP") jars)"
  exit 0
fi
if ! command -v mvn >/dev/null 2>&1; then
  echo "error: Maven (mvn) is needed once to fetch the $WHAT. Install it (Debian: apt-get install maven) and run make again." >&2
  exit 1
fi
echo "$WHAT: resolving from Maven Central into $JARS_DIR (first run only) ..."
tmp="$JARS_DIR.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT  # a failed fetch leaves no half folder behind
mkdir -p "$tmp" .cache
mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies -DincludeScope=runtime \
  -DoutputDirectory="$(cd "$tmp" && pwd)" -Dmaven.repo.local="$PWD/.cache/m2"
(cd "$tmp" && ls -1 *.jar | sort > manifest.txt)
rm -rf "$JARS_DIR"
mv "$tmp" "$JARS_DIR"
echo "$WHAT: $(wc -l < "$STAMP") jars in $JARS_DIR"
