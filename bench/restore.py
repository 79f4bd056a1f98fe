"""Restore throughput: Eddy's chunked restore (a RocksDB write batch per consumed batch) vs Kafka Streams.

For each changelog size (default 1M and 10M records over about 1M distinct keys) this fills a
compacted changelog ``<app>-store-changelog`` once, then restores it into an empty state
directory with

- Eddy: the runtime's own restore: `ProcessorStateManager.open` of a task with that store (which
  opens the empty store with bulk-loading options), then `restore_chunk` in the chunks a task
  runner on the continuous path asks for (`BatchSettings.restore_chunk_records` records or
  `RESTORE_CHUNK_S` seconds each, `--chunk` / `--chunk-seconds` to change them) until restored;
- Kafka Streams 4.x (``bench/kstreams/run.sh restore``), on the same topic,

and prints records/s for each. Eddy's figure is timed like Kafka Streams' (first restore call to
the store being restored, excluding client start-up), and includes the final flush. CPU-seconds
are printed too (Eddy: this process; Kafka Streams: its JVM, start-up included), since on a
shared machine the wall clock also measures the neighbours.

``--tasks N`` spreads the changelog over N partitions and restores N tasks at once, a chunk of
each in turn, as a task runner does after a node loss or a scale-out (Kafka Streams restores the
N partitions in one instance); Eddy's line then also gives how much this process grew while it
restored (its peak resident memory over the start's), the figure a pod's memory limit is about.

    .venv/bin/python bench/restore.py                       # starts its own broker
    .venv/bin/python bench/restore.py --bootstrap 127.0.0.1:9092 --sizes 1000000
    .venv/bin/python bench/restore.py --skip-kstreams --repeat 3

Without ``--bootstrap`` a broker is started with infra/kafka/kafka.sh in a temporary folder
and stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from eddy_runtime.executor.continuous_assignment import RESTORE_CHUNK_S  # noqa: E402
from eddy_runtime.protocol.work import BatchSettings  # noqa: E402
from eddy_runtime.state import (  # noqa: E402
    ChangelogTopicSpec,
    ProcessorStateManager,
    StoreSpec,
    ensure_changelog_topics,
)
from tests.servers import kafka_broker  # noqa: E402

STORE = StoreSpec.key_value("store")  # bytes keys and values, as the Kafka Streams program uses
#: what a task runner's restore step asks for (executor/active_batch.py with the continuous path's settings)
RUNNER_CHUNK_RECORDS = {f.name: f.default for f in fields(BatchSettings)}["restore_chunk_records"]


@contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    """The given broker, or a fresh one from infra/kafka/kafka.sh (as the tests start it)."""
    if bootstrap:
        yield bootstrap
        return
    base = Path(tempfile.mkdtemp(prefix="eddy-bench-kafka-"))
    try:
        with kafka_broker(base) as kafka:
            yield kafka.bootstrap
    finally:
        shutil.rmtree(base, ignore_errors=True)


def fill_changelog(bootstrap: str, topic: str, records: int, keys: int, value_bytes: int, seed: int,
                   partitions: int = 1) -> float:
    """Write `records` records over `keys` keys: every key once (in random order), then random
    repeats, as a store's updates arrive in a changelog; key k on partition k % `partitions`."""
    p = Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20, "compression.type": "lz4",
        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2 << 20, "acks": "all",
    })
    rnd = random.Random(seed)
    first = list(range(keys))
    rnd.shuffle(first)
    started = time.monotonic()
    produce = p.produce
    value = os.urandom(value_bytes)
    for i in range(records):
        k = first[i] if i < keys else rnd.randrange(keys)
        while True:
            try:
                produce(topic, value, b"key-%09d" % k, partition=k % partitions)
                break
            except BufferError:
                p.poll(0.1)
    if p.flush(300):
        raise RuntimeError("changelog fill did not finish")
    return time.monotonic() - started


def resident_mb() -> float:
    """This process' resident memory now, in MB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def eddy_restore(bootstrap: str, app: str, state_root: Path, chunk: int, chunk_s: float,
                 tasks: int = 1) -> dict[str, float]:
    """Restore tasks 0_0..0_<tasks-1> at once, a chunk of each in turn (a task runner's way)."""
    state_dir = state_root / "eddy"
    shutil.rmtree(state_dir, ignore_errors=True)
    before = peak = resident_mb()
    sampling = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not sampling.is_set():
            peak = max(peak, resident_mb())
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    mgrs = [ProcessorStateManager.open(app, f"0_{p}", [STORE], state_dir, bootstrap) for p in range(tasks)]
    try:
        started = time.monotonic()
        cpu = time.process_time()
        chunks = 0
        while not all(m.restored for m in mgrs):
            for m in mgrs:
                if not m.restored:
                    m.restore_chunk(max_records=chunk, max_seconds=chunk_s)
                    chunks += 1
        seconds = time.monotonic() - started
        cpu_s = time.process_time() - cpu
        restored = sum(m.progress.restored for m in mgrs)
        keys = sum(m.store("store").size().keys for m in mgrs)
    finally:
        for m in mgrs:
            m.close()
        sampling.set()
        sampler.join()
        shutil.rmtree(state_dir, ignore_errors=True)
    return {"records": restored, "seconds": seconds, "records_per_s": restored / seconds,
            "cpu_s": cpu_s, "records_per_cpu_s": restored / cpu_s, "chunks": chunks,
            "keys_estimate": keys, "grew_mb": peak - before}


def kstreams_restore(bootstrap: str, app: str, topic: str, state_root: Path) -> dict[str, float] | str:
    script = REPO / "bench/kstreams/run.sh"
    if not script.exists():
        return "bench/kstreams/run.sh not found"
    state_dir = state_root / "kstreams"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [str(script), "restore", "--bootstrap", bootstrap, "--changelog-topic", topic, "--app-id", app,
         "--state-dir", str(state_dir)],
        capture_output=True, text=True, timeout=3600,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(state_dir, ignore_errors=True)
    if proc.returncode != 0:
        return f"exit {proc.returncode}: {proc.stderr.strip()[-800:]}"
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    result = json.loads(line)
    # The whole JVM's CPU, start-up included (a few CPU-seconds), so per-CPU figures favour Eddy.
    result["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result["records_per_cpu_s"] = result["records"] / result["cpu_s"] if result["cpu_s"] else 0.0
    return result


def report(system: str, runs: list[dict[str, float]], note: str) -> dict[str, object]:
    """Print the middle run by records/s (the lower middle of an even count) and every run;
    returns them."""
    ordered = sorted(runs, key=lambda r: r["records_per_s"])
    mid = ordered[(len(ordered) - 1) // 2]

    def cpu_per_m(r: dict[str, float]) -> float:
        return r["cpu_s"] / r["records"] * 1e6

    def grew(r: dict[str, float]) -> str:
        return f", grew {r['grew_mb']:,.0f} MB" if "grew_mb" in r else ""

    every = "; ".join(f"{r['records_per_s']:,.0f}/s in {r['seconds']:.2f}s, {cpu_per_m(r):.2f} CPU-s/M{grew(r)}"
                      for r in runs)
    print(f"  {system:<11} {mid['records_per_s']:>12,.0f} records/s  (middle of {len(runs)}: {mid['records']:,.0f} "
          f"records in {mid['seconds']:.2f}s, {mid['cpu_s']:.1f} CPU-s = {cpu_per_m(mid):.2f} CPU-s per M records; "
          f"{note})\n  {'':<11} every run: {every}", flush=True)
    return {"middle": mid, "runs": runs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="an existing broker; default: start one with infra/kafka/kafka.sh")
    ap.add_argument("--sizes", default="1000000,10000000", help="changelog sizes in records, comma-separated")
    ap.add_argument("--keys", type=int, default=1_000_000, help="distinct keys (at most the size)")
    ap.add_argument("--value-bytes", type=int, default=32)
    ap.add_argument("--chunk", type=int, default=RUNNER_CHUNK_RECORDS,
                    help="records per restore_chunk call at most (default: the task runner's)")
    ap.add_argument("--chunk-seconds", type=float, default=RESTORE_CHUNK_S,
                    help="seconds per restore_chunk call at most (default: the continuous path's)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each system, interleaved; the middle one is reported")
    ap.add_argument("--tasks", type=int, default=1,
                    help="changelog partitions, restored at once as that many tasks (a chunk of each in turn)")
    ap.add_argument("--skip-kstreams", action="store_true")
    ap.add_argument("--state-dir", help="where stores are restored (default: a temporary folder)")
    args = ap.parse_args()

    sizes = [int(s) for s in args.sizes.split(",")]
    state_root = Path(args.state_dir or tempfile.mkdtemp(prefix="eddy-bench-state-"))
    results = []
    with broker(args.bootstrap) as bootstrap:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        if not args.skip_kstreams and (REPO / "bench/kstreams/run.sh").exists():
            subprocess.run([str(REPO / "bench/kstreams/run.sh"), "build"], check=True, stdout=subprocess.DEVNULL)
        for size in sizes:
            keys = min(args.keys, size)
            app = f"bench-{uuid.uuid4().hex[:6]}"
            topic = f"{app}-store-changelog"
            # Compacted as the store needs, but never compacted during the benchmark, so both
            # systems restore the same records.
            ensure_changelog_topics(admin, [ChangelogTopicSpec(topic, args.tasks, extra_config=(
                ("min.compaction.lag.ms", str(7 * 24 * 3600 * 1000)),))])
            fill_s = fill_changelog(bootstrap, topic, size, keys, args.value_bytes, seed=size, partitions=args.tasks)
            print(f"\nchangelog {topic}: {size:,} records over {keys:,} keys, {args.value_bytes}-byte values, "
                  f"{args.tasks} partition(s) (filled in {fill_s:.1f}s)", flush=True)
            row: dict[str, object] = {"records": size, "keys": keys}
            # interleaved (Eddy, Kafka Streams, Eddy, ...), so that a busy spell of the machine
            # does not fall on one system's runs only
            runs: list[dict[str, float]] = []
            ks_runs: list[dict[str, float] | str] = []
            for _ in range(args.repeat):
                runs.append(eddy_restore(bootstrap, app, state_root, args.chunk, args.chunk_seconds, args.tasks))
                if not args.skip_kstreams:
                    ks_runs.append(kstreams_restore(bootstrap, app, topic, state_root))
            row["eddy"] = report("eddy", runs, f"{args.chunk:,} records / {args.chunk_seconds:g} s chunks")
            if not args.skip_kstreams:
                ok = [r for r in ks_runs if isinstance(r, dict)]
                if ok:
                    row["kstreams"] = report("kstreams", ok, "JVM CPU with start-up")
                failed = [r for r in ks_runs if isinstance(r, str)]
                if failed:
                    row["kstreams_failed"] = failed
                    print(f"  kstreams    {len(failed)} run(s) failed: {failed[0]}", flush=True)
            for f in admin.delete_topics([topic]).values():
                f.result(60)
            results.append(row)
    if not args.state_dir:
        shutil.rmtree(state_root, ignore_errors=True)
    print("\n" + json.dumps({"restore": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
