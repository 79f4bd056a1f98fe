"""The stateful word count run by Quix Streams, the Python peer in bench/throughput.py.

Runs in its own virtual environment (Quix Streams pins an older confluent-kafka than Eddy), so
it imports nothing from the project. Same contract as ``bench/kstreams/run.sh wordcount``:

    python wordcount.py --bootstrap H:P --input T --output T --app-id APPID --expected-records N
                        [--state-dir DIR] [--commit-interval-s 0.1] [--timeout-s 1800]

Input value = one word (UTF-8 string, key ignored); the words are re-keyed through Quix's
repartition topic (``group_by``), counted per word in Quix's RocksDB state (``apply(...,
stateful=True)``, with its changelog topic) and every updated count goes to the output topic:
key = word (UTF-8), value = count as a 64-bit big-endian long, as Kafka Streams' program writes.
Exactly-once (Quix's transactional producer), input read from the earliest offset.

It stops once N records were counted, commits, and prints exactly one JSON line on stdout:
``{"records","seconds","records_per_s","p50_ms","p99_ms","output_records"}`` where ``seconds``
runs from the first input record read to the N-th count update handed to the producer, and
p50/p99 are ``now - input timestamp`` at each count update (meaningful for live input only;
the benchmark measures latency itself at its read_committed consumer). Progress on stderr.
Exit codes: 0 done, 1 failure, 2 timeout.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import struct
import sys
import threading
import time

from quixstreams import Application, State

PROGRAM = "quix-wordcount"


def percentile(sorted_values: list[int], q: float) -> int:
    """Nearest-rank percentile (the Kafka Streams program uses the same); -1 without samples."""
    if not sorted_values:
        return -1
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--app-id", required=True, help="consumer group; new per run")
    ap.add_argument("--expected-records", type=int, required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--commit-interval-s", type=float, default=0.1)
    ap.add_argument("--timeout-s", type=float, default=1800)
    args = ap.parse_args()
    expected = args.expected_records

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.app_id,
        processing_guarantee="exactly-once",
        auto_offset_reset="earliest",
        commit_interval=args.commit_interval_s,
        state_dir=args.state_dir,
        loglevel="WARNING",
    )
    source = app.topic(args.input, key_deserializer="bytes", value_deserializer="string")
    sink = app.topic(args.output, key_serializer="string", value_serializer="bytes")

    first_input = [0.0]
    counted = [0]
    done_at = [0.0]
    latencies: list[int] = []

    def mark_input(word: str) -> None:
        if not first_input[0]:
            first_input[0] = time.monotonic()
            print(f"{PROGRAM}: first input record read", file=sys.stderr, flush=True)

    def count(word: str, state: State) -> bytes:
        n = state.get("n", 0) + 1
        state.set("n", n)
        return struct.pack(">q", n)

    def counted_one(value: bytes, key: object, timestamp: int, headers: object) -> None:
        # Runs after to_topic handed the update to the producer: the update is "emitted".
        latencies.append(int(time.time() * 1000) - timestamp)
        counted[0] += 1
        if counted[0] == expected:
            done_at[0] = time.monotonic()
            app.stop()

    sdf = app.dataframe(source)
    sdf = sdf.update(mark_input)
    # String serdes on the repartition topic, as Kafka Streams' program uses (Quix defaults to JSON).
    sdf = sdf.group_by(lambda word: word, name="words", key_serializer="string", key_deserializer="string",
                       value_serializer="string", value_deserializer="string")
    sdf = sdf.apply(count, stateful=True)
    sdf = sdf.to_topic(sink)
    sdf = sdf.update(counted_one, metadata=True)

    def watchdog() -> None:
        if not done_at[0]:
            print(f"{PROGRAM}: timeout after {args.timeout_s} s: counted {counted[0]} of {expected}",
                  file=sys.stderr, flush=True)
            app.stop(fail=True)

    timer = threading.Timer(args.timeout_s, watchdog)
    timer.daemon = True
    timer.start()
    logging.getLogger("quixstreams").setLevel(logging.WARNING)
    try:
        app.run()
    except Exception as e:  # noqa: BLE001 - reported as the program's failure line
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        return 1
    finally:
        timer.cancel()
    if not done_at[0]:
        print(json.dumps({"error": f"counted {counted[0]} of {expected} records"}), flush=True)
        return 2
    seconds = done_at[0] - first_input[0]
    latencies.sort()
    print(json.dumps({"records": counted[0], "seconds": seconds, "records_per_s": counted[0] / seconds,
                      "p50_ms": percentile(latencies, 0.50), "p99_ms": percentile(latencies, 0.99),
                      "output_records": len(latencies)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
