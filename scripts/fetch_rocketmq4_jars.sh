#!/usr/bin/env bash
# Fetch Apache RocketMQ 4.9.8's Java client and ACL hook (scripts/rocketmq4-jars.pom.xml) from
# Maven Central once into jars/rocketmq4/ (or $RMQ_SPARK_ROCKETMQ4_JARS), as
# fetch_rocketmq_jars.sh fetches the name server's. For the remoting tests (a 4.x client
# against the broker), never Spark's classpath.
set -euo pipefail
here="$(dirname "$0")"
ROCKETMQ_JARS_DIR=${RMQ_SPARK_ROCKETMQ4_JARS:-jars/rocketmq4} \
  ROCKETMQ_POM=scripts/rocketmq4-jars.pom.xml ROCKETMQ_WHAT="rocketmq 4.x client jars" \
  exec "$here/fetch_rocketmq_jars.sh"
