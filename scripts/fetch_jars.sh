#!/usr/bin/env bash
# Fetch the Delta Lake jars from Maven Central once into ./jars (with a Maven cache in
# ./.cache/m2), and write jars/manifest.txt. A second run with the jars present does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
JARS_DIR=${JARS_DIR:-jars}
POM=scripts/delta-jars.pom.xml
STAMP="$JARS_DIR/manifest.txt"
if [ -f "$STAMP" ] && [ "$STAMP" -nt "$POM" ] && while read -r jar; do [ -f "$JARS_DIR/$jar" ] || exit 1; done < "$STAMP"; then
  echo "delta jars: cached in $JARS_DIR ($(wc -l < "$STAMP") jars)"
  exit 0
fi
if ! command -v mvn >/dev/null 2>&1; then
  echo "error: Maven (mvn) is needed once to fetch the Delta Lake jars. Install it (Debian: apt-get install maven) and run make again." >&2
  exit 1
fi
echo "delta jars: resolving from Maven Central into $JARS_DIR (first run only) ..."
tmp="$JARS_DIR.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp" .cache
mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
  -DincludeGroupIds=io.delta -DincludeScope=runtime \
  -DoutputDirectory="$PWD/$tmp" -Dmaven.repo.local="$PWD/.cache/m2"
(cd "$tmp" && ls -1 *.jar | sort > manifest.txt)
# jars/rocketmq/ (scripts/fetch_rocketmq_jars.sh) is kept: it is not Delta's to replace.
[ ! -d "$JARS_DIR/rocketmq" ] || mv "$JARS_DIR/rocketmq" "$tmp/rocketmq"
rm -rf "$JARS_DIR"
mv "$tmp" "$JARS_DIR"
echo "delta jars: $(wc -l < "$STAMP") jars in $JARS_DIR"
