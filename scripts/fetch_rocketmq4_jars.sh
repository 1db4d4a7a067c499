#!/usr/bin/env bash
# Fetch Apache RocketMQ 4.9.8's Java client and ACL hook (scripts/rocketmq4-jars.pom.xml) from Maven
# Central once into jars/rocketmq4/ (or $RMQ_SPARK_ROCKETMQ4_JARS), with a Maven cache in
# ./.cache/m2, and write its manifest.txt. A second run with the jars present does nothing.
# These jars are for the remoting tests (a 4.x producer against the broker), never Spark's classpath.
set -euo pipefail
cd "$(dirname "$0")/.."
JARS_DIR=${RMQ_SPARK_ROCKETMQ4_JARS:-jars/rocketmq4}
POM=scripts/rocketmq4-jars.pom.xml
STAMP="$JARS_DIR/manifest.txt"
if [ -f "$STAMP" ] && [ "$STAMP" -nt "$POM" ] && while read -r jar; do [ -f "$JARS_DIR/$jar" ] || exit 1; done < "$STAMP"; then
  echo "rocketmq 4.x jars: cached in $JARS_DIR ($(wc -l < "$STAMP") jars)"
  exit 0
fi
if ! command -v mvn >/dev/null 2>&1; then
  echo "error: Maven (mvn) is needed once to fetch the RocketMQ 4.x client jars. Install it (Debian: apt-get install maven) and run make again." >&2
  exit 1
fi
echo "rocketmq 4.x jars: resolving from Maven Central into $JARS_DIR (first run only) ..."
tmp="$JARS_DIR.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT  # a failed fetch leaves no half folder behind
mkdir -p "$tmp" .cache
mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies -DincludeScope=runtime \
  -DoutputDirectory="$(cd "$tmp" && pwd)" -Dmaven.repo.local="$PWD/.cache/m2"
(cd "$tmp" && ls -1 *.jar | sort > manifest.txt)
rm -rf "$JARS_DIR"
mv "$tmp" "$JARS_DIR"
echo "rocketmq 4.x jars: $(wc -l < "$STAMP") jars in $JARS_DIR"
