"""Word count on a three-node Kafka cluster with replicationFactor 3 and minInsyncReplicas 2: a
broker stopped and restarted mid-run costs no count (exactly-once), and every topic the app made
really has three replicas."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

from eddy_runtime.driver.outcomes import BatchReport, DriverError
from eddy_runtime.kafka.topics import describe_topics
from eddy_runtime.state import changelog_topic_name
from tests.runtime.apps import driver_for, latest_counts, produce, read_all, streamapp

pytestmark = pytest.mark.integration

WORDS = [f"w{i:02d}" for i in range(60)]
TIMEOUT_S = 420.0


def lines(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 12))) for _ in range(n)]


def replicated(bootstrap: str, rf: int = 3, min_isr: int = 2) -> dict:
    return {"bootstrapServers": bootstrap, "topics": {"replicationFactor": rf, "minInsyncReplicas": min_isr}}


def group_coordinator(k, group: str) -> int:
    """The broker coordinating `group`: the leader of its __consumer_offsets partition (Kafka's
    `abs(group.hashCode()) % partitions`)."""
    h = 0
    for ch in group:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    h = 0 if h == -(1 << 31) else abs(h)
    offsets = k.admin.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"].partitions
    return offsets[h % len(offsets)].leader


class Background:
    """One step (stopping or starting a broker, producing) off the driver's thread, so batches keep
    running meanwhile; its error, if any, fails the test."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.error: BaseException | None = None
        self.done = threading.Event()

        def run() -> None:
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - handed to the test's thread
                self.error = e
            finally:
                self.done.set()

        threading.Thread(target=run, daemon=True).start()

    def finished(self) -> bool:
        if self.error is not None:
            raise AssertionError(f"background step failed: {self.error}") from self.error
        return self.done.is_set()


@pytest.mark.timeout(900)  # a three-node cluster and Spark on a shared 2-core machine
def test_word_count_stays_exact_with_rf3_while_a_broker_is_stopped_and_restarted(kafka_cluster, spark, tmp_path):
    k = kafka_cluster
    app = k.unique_name("wcr")
    source = k.create_topic(f"{app}-lines", partitions=4, replication_factor=3, config={"min.insync.replicas": "2"})
    out = f"{app}-counts"
    changelog, repartition = changelog_topic_name(app, "counts"), f"{app}-words-repartition"
    before, during, after = lines(800, seed=1), lines(300, seed=2), lines(300, seed=3)
    produce(k.bootstrap, source, ((None, line.encode()) for line in before))
    spec = streamapp(app, k.bootstrap, "examples.wordcount.app", {"input_topic": source, "output_topic": out},
                     processingGuarantee="exactly_once", state={"standbyReplicas": 1},
                     kafka=replicated(k.bootstrap))
    # Small batches: the input takes many of them, so the broker goes away mid-run. The broker that
    # goes is the app's group coordinator (the transactions' input offsets move with it; some of
    # the app's partition leaders too); any one of the three voters leaves a quorum.
    driver = driver_for(spark, spec, str(tmp_path / "state"), max_batch_records=300)
    driver.prepare()

    victim = 0  # chosen once the first batch has committed
    reports: list[BatchReport] = []
    phase = {"name": "before", "down_batches": 0}
    steps: dict[str, Background] = {}
    idle = [0]
    t0 = time.monotonic()
    deadline = t0 + TIMEOUT_S

    def enter(name: str) -> None:
        phase["name"] = name
        print(f"{time.monotonic() - t0:6.1f}s batch {len(reports)}: {name} (broker {victim})", flush=True)

    def stop_and_produce() -> None:
        k.stop_broker(victim)
        produce(k.bootstrap, source, ((None, line.encode()) for line in during))

    def start_and_produce() -> None:
        k.start_broker(victim)
        produce(k.bootstrap, source, ((None, line.encode()) for line in after))

    def until(r: BatchReport) -> bool:
        nonlocal victim
        reports.append(r)
        if r.outcome != "ok":
            print(f"{time.monotonic() - t0:6.1f}s batch {r.batch_id} {r.outcome}: {(r.error or '')[:300]}", flush=True)
        if time.monotonic() > deadline:
            raise AssertionError(f"not done after {TIMEOUT_S}s in phase {phase}; lag {driver.last_lag}; last batch "
                                 f"{r.outcome} {r.error} {[(x.task, x.status, x.message) for x in r.results]}")
        name = phase["name"]
        if name == "before" and r.outcome == "ok" and r.records_in:
            victim = group_coordinator(k, app)
            steps["stop"] = Background(stop_and_produce)
            enter("stopping")
        elif name == "stopping" and steps["stop"].finished():
            enter("down")
        elif name == "down":
            assert victim not in k.live_brokers()
            if r.outcome == "ok" and r.records_in:
                phase["down_batches"] += 1
            elif not r.records_in:  # input ran dry before three batches committed: more of it
                more = lines(50, seed=len(reports))
                during.extend(more)
                produce(k.bootstrap, source, ((None, line.encode()) for line in more))
            if phase["down_batches"] >= 3:
                steps["start"] = Background(start_and_produce)
                enter("starting")
        elif name == "starting" and steps["start"].finished():
            enter("after")
        elif name == "after":
            busy = r.records_in or sum(driver.last_lag.values()) or r.outcome != "ok" or r.by_status("restoring")
            idle[0] = 0 if busy else idle[0] + 1
            return idle[0] >= 2
        return False

    driver.run(until=until)
    elapsed = time.monotonic() - t0

    words = Counter(w for line in before + during + after for w in line.split())
    assert latest_counts(k.bootstrap, out) == words
    # Every update of a count is visible once (nothing duplicated by a retried batch): counts only go up.
    seen: dict[bytes, int] = {}
    for m in read_all(k.bootstrap, out):
        value = int.from_bytes(m.value(), "big")
        assert value > seen.get(m.key(), 0), m.key()
        seen[m.key()] = value
    assert phase["down_batches"] >= 3

    # What the app made has three replicas and min.insync.replicas 2, and the returned broker
    # is back in every partition's in-sync set.
    topics = [changelog, repartition, out]
    described = describe_topics(k.admin, topics)
    assert {t: (d.replication_factor, d.min_insync_replicas) for t, d in described.items()} == {
        t: (3, 2) for t in topics
    }
    k.wait_in_sync(topics, timeout_s=60)
    not_ok = [(r.batch_id, r.outcome, (r.error or "")[:200]) for r in reports if r.outcome != "ok"]
    print(f"\n{len(reports)} batches in {elapsed:.0f}s, {phase['down_batches']} committing with broker {victim} "
          f"down; batches not ok while it moved: {not_ok}")


def test_more_replicas_than_brokers_stops_the_driver_before_the_first_batch(kafka_cluster, spark, tmp_path):
    k = kafka_cluster
    app = k.unique_name("wcr")
    source = k.create_topic(f"{app}-lines", partitions=2, replication_factor=3)
    spec = streamapp(app, k.bootstrap, "examples.wordcount.app", {"input_topic": source, "output_topic": f"{app}-o"},
                     kafka=replicated(k.bootstrap, rf=4, min_isr=2))
    with pytest.raises(DriverError) as err:
        driver_for(spark, spec, str(tmp_path / "state")).prepare()
    assert f"could not create changelog topic '{app}-counts-changelog'" in str(err.value)
    assert "INVALID_REPLICATION_FACTOR" in str(err.value)


def test_replication_factor_minus_one_gives_the_brokers_default(kafka_cluster):
    from eddy_contract.spec import TopicsSpec
    from eddy_runtime.kafka.topics import TopicRequirement, ensure_topics

    k = kafka_cluster
    name = k.unique_name("dflt")
    req = TopicRequirement(name, "changelog", 2, check_partitions=True, cleanup_policy="compact")
    assert ensure_topics(k.admin, [req], TopicsSpec(replication_factor=-1, min_insync_replicas=2)) == {name: True}
    assert describe_topics(k.admin, [name])[name].replication_factor == 3  # the cluster's default
