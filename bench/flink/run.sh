#!/usr/bin/env bash
# Apache Flink peer program for Eddy's Nexmark benchmark (bench/nexmark.py).
#
# Builds bench/flink (Flink 2.2's DataStream API, its Kafka connector and RocksDB state backend)
# once into $EDDY_CACHE/flink/<hash of pom.xml and sources>/ and runs its program. EDDY_CACHE
# defaults to <repo>/.cache. The program prints one JSON line on stdout; progress and Flink's WARN
# logs go to stderr. Exit codes: 0 done, 1 the job failed, 64 bad usage.
#
#   run.sh build
#       Only build (or find the cached build); prints the build folder.
#
#   run.sh nexmark --bootstrap HOST:PORT --prefix P --output-prefix O --query qN --app-id ID
#                  [--state-dir DIR] [--config key=value]...
#       Runs Nexmark query qN (q0, q1, q2, q3, q4, q5, q7, q8, as bench/kstreams' NexmarkBench writes
#       them) as a Flink job on a local MiniCluster in this process: one slot, parallelism 1,
#       reading P-person, P-auction and P-bid (those the query needs) from the earliest offset as
#       consumer group ID, whose offsets are committed with each checkpoint, and writing O-qN
#       (which must exist) exactly-once: checkpoints every 100 ms, Kafka transactions committed
#       with them (transactional ids prefixed ID). State in RocksDB, incremental checkpoints,
#       both under DIR (a temporary folder, deleted afterwards, if not given). Prints
#       "flink-nexmark qN: S s: INITIALIZING -> RUNNING" on stderr once every task runs, runs
#       until stdin is closed, then cancels the job and exits.
#       -> {"query":"qN","seconds":S}
#       --config key=value is handed to Flink's configuration as is and wins over the program's
#       settings (e.g. --config state.backend.rocksdb.timer-service.factory=HEAP).
#
# Environment: EDDY_CACHE (build cache), FLINK_JAVA_OPTS (default -Xmx2g), FLINK_LOG_LEVEL
# (slf4j-simple level, default warn).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=bench/maven_build.sh
source "$repo/bench/maven_build.sh"

build() {
    maven_build flink "$here" eddy-flink-bench.jar
}

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 64
}

[[ $# -ge 1 ]] || usage
command="$1"
shift
case "$command" in
    build) build; exit 0 ;;
    nexmark) main=dev.eddy.bench.flink.NexmarkBench ;;
    -h|--help|help) usage ;;
    *) echo "run.sh: unknown command '$command'" >&2; usage ;;
esac

dir="$(build)"
# shellcheck disable=SC2206  # FLINK_JAVA_OPTS holds several options on purpose
java_opts=(${FLINK_JAVA_OPTS:--Xmx2g})
java_opts+=(
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=${FLINK_LOG_LEVEL:-warn}"
    -Dorg.slf4j.simpleLogger.logFile=System.err
    # The Kafka sink's writer and committer register a metric of the same name: a warning per checkpoint.
    -Dorg.slf4j.simpleLogger.log.org.apache.flink.metrics.MetricGroup=error
)
exec java "${java_opts[@]}" -cp "$dir/eddy-flink-bench.jar:$dir/lib/*" "$main" "$@"
