"""What a task runner's input consumer costs the broker, by its ``fetch.wait.max.ms``.

A runner on the continuous path reads its actives' input with one read_committed consumer
(eddy_runtime.executor.input_poller). A broker holds a fetch until data arrive or the wait is up,
so the wait sets how often an idle consumer asks again: each of a runner's brokers answers one
fetch per wait. This prints, for each wait (default 10, 50, 100, 500 and 1000 ms; librdkafka's
and the Java client's default is 500):

- the broker's CPU (cores, from /proc) while `--consumers` consumers (one per runner) sit at the
  end of 16 partitions;
- the latency from a send to its delivery to such a consumer, for a plain and for a transactional
  producer (commit included: what a downstream sub-topology sees of an upstream runner);
- how long a consumer fetching one partition takes to deliver the first record of a partition
  assigned to it (`incremental_assign`, as when a task moves to the runner).

    .venv/bin/python bench/fetch_wait.py                   # starts its own broker
    .venv/bin/python bench/fetch_wait.py --repeat 3 --waits 10,500

Without ``--bootstrap`` a broker is started with infra/kafka/kafka.sh in a temporary folder and
stopped at the end. Each figure is listed for every run, then the middle one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

PARTITIONS = 16


def consumer(bootstrap: str, wait_ms: int) -> Consumer:
    """A consumer configured as the runner's input poller is, but for the wait."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-fetch-wait", "enable.auto.commit": False,
                     "enable.auto.offset.store": False, "isolation.level": "read_committed",
                     "fetch.wait.max.ms": wait_ms})


def broker_cpu_s(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def idle_cost(bootstrap: str, topic: str, wait_ms: int, consumers: int, pids: list[int], seconds: float) -> float:
    """Broker cores used while `consumers` consumers wait at the end of every partition."""
    cs = [consumer(bootstrap, wait_ms) for _ in range(consumers)]
    try:
        for c in cs:
            c.assign([TopicPartition(topic, p, -1) for p in range(PARTITIONS)])
        settle = time.monotonic() + 3
        while time.monotonic() < settle:
            for c in cs:
                c.poll(0.01)
        start_cpu, start = broker_cpu_s(pids), time.monotonic()
        while time.monotonic() < start + seconds:
            for c in cs:
                c.poll(0.05)
        return (broker_cpu_s(pids) - start_cpu) / (time.monotonic() - start)
    finally:
        for c in cs:
            c.close()


def delivery_ms(bootstrap: str, topic: str, wait_ms: int, transactional: bool, sends: int = 30) -> float:
    """The median send-to-delivery latency, one record every 137 ms."""
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 0}
    if transactional:
        conf["transactional.id"] = f"bench-fetch-wait-{uuid.uuid4().hex[:8]}"
    p = Producer(conf)
    if transactional:
        p.init_transactions()
    c = consumer(bootstrap, wait_ms)
    c.assign([TopicPartition(topic, q, -1) for q in range(PARTITIONS)])
    for _ in range(20):
        c.poll(0.05)
    latencies = []
    try:
        for i in range(sends):
            time.sleep(0.137)
            sent = time.time()
            if transactional:
                p.begin_transaction()
            p.produce(topic, repr(sent).encode(), partition=i % PARTITIONS)
            if transactional:
                p.commit_transaction()
            else:
                p.flush()
            while True:
                m = c.poll(1.0)
                if m is not None and not m.error():
                    latencies.append((time.time() - float(m.value())) * 1000)
                    break
    finally:
        c.close()
    return statistics.median(latencies)


def first_record_ms(bootstrap: str, topic: str, wait_ms: int, partition: int) -> float:
    """From `incremental_assign` of a partition with records to its first one delivered, for a
    consumer already fetching another partition (at its end)."""
    c = consumer(bootstrap, wait_ms)
    try:
        # at a position, as a runner's task is (its checkpoint's), here the partition's end
        c.assign([TopicPartition(topic, 0, c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])])
        for _ in range(20):
            c.poll(0.05)
        start = time.monotonic()
        c.incremental_assign([TopicPartition(topic, partition, 0)])
        while True:
            m = c.poll(0.01)
            if m is not None and not m.error():
                return (time.monotonic() - start) * 1000
    finally:
        c.close()


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[tuple[str, list[int]]]:
    """(bootstrap, the broker's pids: none for a broker of someone else's)."""
    if bootstrap:
        yield bootstrap, []
        return
    from tests.servers import kafka_broker
    with tempfile.TemporaryDirectory(prefix="eddy-bench-fetch-wait-") as tmp, kafka_broker(Path(tmp)) as k:
        yield k.bootstrap, [int((k.data_dir / "kafka.pid").read_text())]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", help="an existing broker (its CPU is then not measured)")
    ap.add_argument("--waits", default="10,50,100,500,1000", help="fetch.wait.max.ms values, comma-separated")
    ap.add_argument("--consumers", type=int, default=4, help="idle consumers at once (one per task runner)")
    ap.add_argument("--seconds", type=float, default=15.0, help="how long the idle cost is measured")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    waits = [int(w) for w in args.waits.split(",")]
    with broker(args.bootstrap) as (bootstrap, pids):
        topic = f"bench-fetch-wait-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result()
        p = Producer({"bootstrap.servers": bootstrap})
        for q in range(PARTITIONS):
            p.produce(topic, b"x", partition=q)
        p.flush()
        time.sleep(1)
        print(f"{args.consumers} idle read_committed consumers on {PARTITIONS} partitions; "
              f"broker pid(s) {pids or 'not ours'}")
        print(f"{'fetch.wait.max.ms':>17}  {'broker cores':>24}  {'plain ms p50':>22}  {'txn ms p50':>22}  "
              f"{'new partition ms':>22}")
        for wait in waits:
            runs: dict[str, list[float]] = {"cpu": [], "plain": [], "txn": [], "move": []}
            for r in range(args.repeat):
                if pids:
                    runs["cpu"].append(idle_cost(bootstrap, topic, wait, args.consumers, pids, args.seconds))
                runs["plain"].append(delivery_ms(bootstrap, topic, wait, transactional=False))
                runs["txn"].append(delivery_ms(bootstrap, topic, wait, transactional=True))
                runs["move"].append(statistics.median(
                    first_record_ms(bootstrap, topic, wait, 1 + (r * 5 + i) % (PARTITIONS - 1)) for i in range(5)))

            def cell(values: list[float], digits: int) -> str:
                if not values:
                    return "-"
                listed = "/".join(f"{v:.{digits}f}" for v in values)
                return f"{statistics.median(values):.{digits}f} ({listed})" if len(values) > 1 else listed

            print(f"{wait:>17}  {cell(runs['cpu'], 3):>24}  {cell(runs['plain'], 1):>22}  {cell(runs['txn'], 1):>22}  "
                  f"{cell(runs['move'], 0):>22}", flush=True)


if __name__ == "__main__":
    main()
