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
readonly STAMP="${CACHE}/jars.stamp"
readonly POM="${HERE}/pom.xml"

die() { echo "connector.sh: $*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

pom_hash() { sha256sum "${POM}" | cut -d' ' -f1; }

cmd_fetch() {
  mkdir -p "${CACHE}"
  # Concurrent benches may all call fetch: one gathers, the rest wait.
  exec 9>"${CACHE}/fetch.lock"
  flock 9
  local want
  want="$(pom_hash)"
  if [[ ! -f "${STAMP}" || "$(cat "${STAMP}")" != "${want}" || ! -d "${JARS}" ]]; then
    # Gather into a fresh folder and swap it in, so a failed or interrupted
    # fetch never leaves a half-filled jars folder behind a valid stamp.
    local tmp="${CACHE}/jars.tmp"
    rm -rf "${tmp}"
    # Maven checks the SHA-1 of every artifact it downloads (-C: a mismatch fails).
    if ! mvn -q -B -C -f "${POM}" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="${tmp}" >"${CACHE}/fetch.log" 2>&1; then
      cat "${CACHE}/fetch.log" >&2
      die "fetching the Kafka connector's jars failed (see above)"
    fi
    ls "${tmp}"/spark-sql-kafka-0-10_*.jar >/dev/null 2>&1 || die "no spark-sql-kafka jar in ${tmp}"
    rm -rf "${JARS}"
    mv "${tmp}" "${JARS}"
    echo "${want}" >"${STAMP}"
  fi
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
