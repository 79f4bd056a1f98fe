#!/usr/bin/env bash
# Spark's Kafka connector (spark-sql-kafka-0-10) and its run-time jars for the
# Spark Structured Streaming peer of bench/throughput.py (bench/sss/wordcount.py).
#
#   connector.sh fetch     gather the jars that infra/spark/pom.xml names into
#                          $EDDY_CACHE/spark-kafka/jars (once per pom.xml)
#   connector.sh jars      fetch if needed, then print the jars as one
#                          comma-separated list (the form spark.jars takes)
#
# Environment: EDDY_CACHE (cache folder, default <repo>/.cache, git-ignored).
set -euo pipefail

readonly HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly REPO="$(cd "${HERE}/../.." && pwd)"
readonly CACHE="${EDDY_CACHE:-${REPO}/.cache}/spark-kafka"
readonly JARS="${CACHE}/jars"
readonly POM="${HERE}/pom.xml"
# shellcheck source=../lib/maven-jars.sh
source "${HERE}/../lib/maven-jars.sh"

die() { echo "connector.sh: $*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

cmd_fetch() {
  # Concurrent benches may all call fetch: one gathers, the rest wait.
  maven_jars "${POM}" "${CACHE}" "the Kafka connector's jars" "spark-sql-kafka-0-10_*.jar" || die "no jars"
}

cmd_jars() {
  cmd_fetch
  local jars=("${JARS}"/*.jar)
  local IFS=,
  echo "${jars[*]}"
}

case "${1:-}" in
  fetch) cmd_fetch ;;
  jars) cmd_jars ;;
  *) usage ;;
esac
