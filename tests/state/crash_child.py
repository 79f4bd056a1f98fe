"""The child process of test_crash.py: a stateful word count that can be killed anywhere.

Run as ``python -m tests.state.crash_child <bootstrap> <app> <state_dir> <input_topic> <guarantee>``.
It opens task 0_0 (restoring whatever its store lacks), checks that the store's input offset
agrees with the group's committed offset (exactly_once), then counts the input from the
committed offset to the end in batches, committing each batch, and exits 0 when done (4 when the
input stops short of its end for 60 s).

``CRASH_AT=<point>:<batch>`` makes it SIGKILL itself at a named point of that batch:
``before_commit``, ``between_commit_and_store`` (Kafka committed, store not written) or
``after_store``. The parent also kills it from outside at random times.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter

from confluent_kafka import Consumer, TopicPartition

from eddy_runtime.executor.commit import StateCommitter
from eddy_runtime.state import StoreSpec

COUNTS = StoreSpec.key_value("counts", key_serde="string", value_serde="int64")
BATCH = 100
EXIT_INCONSISTENT = 3
EXIT_STALLED = 4
STALL_S = 60


def crash_point(name: str, batch: int) -> None:
    want = os.environ.get("CRASH_AT", "")
    if want == f"{name}:{batch}":
        os.kill(os.getpid(), signal.SIGKILL)


def main(bootstrap: str, app: str, state_dir: str, input_topic: str, guarantee: str) -> int:
    task = StateCommitter.open(app, "0_0", [COUNTS], state_dir, bootstrap, guarantee=guarantee,
                               lock_timeout=30)
    mgr = task.state
    mgr.restore()
    print("restored", flush=True)
    tp = TopicPartition(input_topic, 0)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": app, "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    (committed,) = consumer.committed([tp], timeout=30)
    position = max(committed.offset, 0)
    stored = mgr.store("counts").offsets.input_offsets.get((input_topic, 0), 0)
    if guarantee == "exactly_once" and stored != position:
        print(f"store reflects input offset {stored} but the group committed {position}", file=sys.stderr)
        return EXIT_INCONSISTENT
    _, end = consumer.get_watermark_offsets(tp, timeout=30)
    consumer.assign([TopicPartition(input_topic, 0, position)])
    batch = 0
    last_progress = time.monotonic()
    while position < end:
        batch += 1
        msgs = [m for m in consumer.consume(min(BATCH, end - position), timeout=10) if m.error() is None]
        if not msgs:
            if time.monotonic() - last_progress > STALL_S:
                print(f"no input past offset {position} (end {end}) for {STALL_S}s", file=sys.stderr)
                return EXIT_STALLED
            continue
        last_progress = time.monotonic()
        words = Counter(m.value().decode() for m in msgs)
        tx = mgr.transaction()
        counts = tx.key_value("counts")
        keys = sorted(words)
        counts.put_many(keys, [c + words[k] for k, c in zip(keys, counts.get_many(keys, default=0), strict=True)])
        position = msgs[-1].offset() + 1
        crash_point("before_commit", batch)
        kc = task.commit_to_kafka(tx, input_offsets={(input_topic, 0): position})
        crash_point("between_commit_and_store", batch)
        task.write_stores(tx, kc)
        crash_point("after_store", batch)
    task.close()
    consumer.close()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
