#!/usr/bin/env bash
# The Nexmark event generator for bench/nexmark.py and tests/test_nexmark_example.py.
#
# Builds bench/nexmark (Apache Beam's Nexmark generator, beam-sdks-java-nexmark, and a Kafka
# producer) once into $EDDY_CACHE/nexmark/<hash of pom.xml and sources>/ and runs it.
# EDDY_CACHE defaults to <repo>/.cache.
#
#   run.sh build
#       Only build (or find the cached build); prints the build folder.
#
#   run.sh generate --bootstrap HOST:PORT --prefix P --events N [--rate R] [--paced true]
#                   [--base-time MS] [--partitions K] [--jsonl FILE]
#       Writes N events of Beam's generator (NexmarkConfiguration.DEFAULT with one generator:
#       1 person : 3 auctions : 46 bids, its hot auctions, sellers and bidders, its padding) to
#       the topics P-person, P-auction and P-bid (created with K partitions, default 1, if
#       missing), JSON values, keyed by the person's id, the auction's id, the bid's auction.
#       Event times start at MS (default: now) and advance by 1/R s per event (R default
#       10,000 events/s, Beam's firstEventRate); each record's timestamp is its event's time.
#       --paced true sends each event at its event time (a live source at R events/s);
#       otherwise as fast as the broker takes them. --jsonl FILE also writes every event, in
#       order, as {"kind","key","timestamp","value"} lines (for the reference, bench/nexmark.py).
#       -> {"events":N,"persons":..,"auctions":..,"bids":..,"seconds":S,"first_timestamp":..,"last_timestamp":..}
#
# Environment: EDDY_CACHE (build cache), NEXMARK_JAVA_OPTS (default -Xmx512m).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=bench/maven_build.sh
source "$repo/bench/maven_build.sh"

build() {
    maven_build nexmark "$here" eddy-nexmark-generator.jar
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
    generate) main=dev.eddy.bench.nexmark.KafkaGenerator ;;
    -h|--help|help) usage ;;
    *) echo "run.sh: unknown command '$command'" >&2; usage ;;
esac

dir="$(build)"
# shellcheck disable=SC2206  # NEXMARK_JAVA_OPTS holds several options on purpose
java_opts=(${NEXMARK_JAVA_OPTS:--Xmx512m})
java_opts+=("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn" -Dorg.slf4j.simpleLogger.logFile=System.err)
exec java "${java_opts[@]}" -cp "$dir/eddy-nexmark-generator.jar:$dir/lib/*" "$main" "$@"
