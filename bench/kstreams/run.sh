#!/usr/bin/env bash
# Kafka Streams peer programs for Eddy's side-by-side benchmarks.
#
# Builds bench/kstreams (Kafka Streams, same version as infra/kafka/pom.xml's
# broker) once into $EDDY_CACHE/kstreams/<hash of pom.xml and sources>/ and runs
# one of its programs. EDDY_CACHE defaults to <repo>/.cache. Each program prints
# exactly one JSON line on stdout; progress and Kafka's WARN logs go to stderr.
# Exit codes: 0 done, 1 Kafka/Kafka Streams failure, 2 timeout, 64 bad usage.
#
#   run.sh build
#       Only build (or find the cached build); prints the build folder.
#
#   run.sh restore --bootstrap HOST:PORT --changelog-topic APPID-STORE-changelog
#                  --app-id APPID [--state-dir DIR] [--timeout-s 1800]
#                  [--config key=value]...
#       Restores the RocksDB key-value store STORE (bytes keys and values) of
#       application APPID from the existing changelog topic, into an empty
#       state dir (a temporary one, deleted afterwards, unless --state-dir;
#       APPID's folder in it is wiped first). Creates the empty input topic
#       APPID-restore-input with the changelog's partition count if missing.
#       Times the first onRestoreStart to the last onRestoreEnd.
#       -> {"records":N,"seconds":S,"records_per_s":R}
#
#   run.sh wordcount --bootstrap HOST:PORT --input TOPIC --output TOPIC
#                    --app-id APPID --expected-records N [--threads 1]
#                    [--state-dir DIR] [--timeout-s 1800] [--config key=value]...
#       Counts words (input value = one word as a UTF-8 string, key ignored;
#       output key = word, value = count as a 64-bit big-endian long) with
#       exactly_once_v2 and commit.interval.ms=100, reading the input from the
#       earliest offset, until N records reached the count store and their
#       updates were emitted. Creates the output topic (input's partition count)
#       if missing. Use a new APPID per run: committed offsets of an old one
#       would skip the input. Prints each state change on stderr, e.g.
#       "kstreams-wordcount: 2.345 s: REBALANCING -> RUNNING" when processing
#       can start (a live producer may wait for "-> RUNNING").
#       seconds: first input record read -> last count update emitted.
#       p50_ms/p99_ms: over every emitted count update, wall clock now minus the
#       record timestamp (the input's producer timestamp, which Kafka Streams
#       carries through repartition and count); meaningful only for input that
#       is produced while the program runs.
#       -> {"records":N,"seconds":S,"records_per_s":R,"p50_ms":P,"p99_ms":Q,"output_records":M}
#       Several instances of one application (bench/failover.py):
#       --expected-records 0 runs until stdin is closed, then closes cleanly and
#       prints the same line (records: counted by this instance);
#       --instance NAME makes it the static member APPID-bench-NAME (instances
#       need different names); --status-file PATH is rewritten every 100 ms with
#       {"state":S,"active":[tasks],"standby":[tasks],"read":N,"counted":M};
#       standbys and group timeouts come as --config (num.standby.replicas=1).
#       A rolling bounce (bench/upgrade.py): --keep-state true keeps the state
#       dir's stores and checkpoints (no cleanUp), --leave-group false closes
#       without leaving the group (the static member keeps its tasks until
#       session.timeout.ms), --version 2 runs the new version (one more,
#       compatible step before the re-key; same store and topics); the status
#       file then also has "version", "restored" (records restored into active
#       tasks), "standby_applied", "lag" (store lag, every 500 ms) and
#       "rebalances".
#
#   --config key=value is handed to Kafka Streams as is and wins over the
#   programs' settings (e.g. --config statestore.cache.max.bytes=0).
#   Both programs join as static members (group.instance.id APPID-bench) and
#   leave the group on close, so a run may follow another with the same APPID
#   without waiting 45 s for the old member's session to expire.
#
# Environment: EDDY_CACHE (build cache), KSTREAMS_JAVA_OPTS (default -Xmx2g),
# KSTREAMS_LOG_LEVEL (slf4j-simple level, default warn).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=bench/maven_build.sh
source "$repo/bench/maven_build.sh"

build() {
    maven_build kstreams "$here" eddy-kstreams-bench.jar
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
    restore) main=dev.eddy.bench.kstreams.RestoreBench ;;
    wordcount) main=dev.eddy.bench.kstreams.WordCountBench ;;
    -h|--help|help) usage ;;
    *) echo "run.sh: unknown command '$command'" >&2; usage ;;
esac

dir="$(build)"
# shellcheck disable=SC2206  # KSTREAMS_JAVA_OPTS holds several options on purpose
java_opts=(${KSTREAMS_JAVA_OPTS:--Xmx2g})
java_opts+=(
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=${KSTREAMS_LOG_LEVEL:-warn}"
    -Dorg.slf4j.simpleLogger.logFile=System.err
    # It warns on every run that a state dir under /tmp may be cleared by the OS.
    -Dorg.slf4j.simpleLogger.log.org.apache.kafka.streams.processor.internals.StateDirectory=error
)
exec java "${java_opts[@]}" -cp "$dir/eddy-kstreams-bench.jar:$dir/lib/*" "$main" "$@"
