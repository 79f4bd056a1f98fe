"""Word count with repartitioning on real Kafka and a local-cluster: exact counts under exactly-once."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.runtime.apps import driver_for, latest_counts, produce, read_all, run_until_idle, streamapp

pytestmark = pytest.mark.integration

WORDS = [f"w{i:02d}" for i in range(60)]


def lines(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 12))) for _ in range(n)]


# The counting sub-topology runs continuously (the default) or as micro-batches; the splitting one
# has a DataFrame step, so it is a micro-batch either way.
@pytest.mark.parametrize(("listener", "execution"),
                         [("plaintext", "continuous"), ("sasl_ssl", "continuous"), ("plaintext", "microBatch")])
def test_word_count_through_a_repartition_topic_is_exact_under_exactly_once(kafka, spark, tmp_path, listener,
                                                                           execution):
    app = kafka.unique_name("wc")
    source = kafka.create_topic(f"{app}-lines", partitions=4)
    out = f"{app}-counts"
    first, second = lines(3000, seed=1), lines(2000, seed=2)
    produce(kafka.bootstrap, source, ((None, line.encode()) for line in first))
    spec = streamapp(app, kafka.bootstrap, "examples.wordcount.app", {"input_topic": source, "output_topic": out},
                     processingGuarantee="exactly_once", state={"standbyReplicas": 1}, kafka=kafka.kafka_spec(listener),
                     execution=execution)
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    reports = run_until_idle(driver)
    assert driver.continuous_subtopologies == ({1} if execution == "continuous" else set())
    assert latest_counts(kafka.bootstrap, out) == Counter(w for line in first for w in line.split())

    # A second run of the same app resumes from its committed offsets and its stores.
    produce(kafka.bootstrap, source, ((None, line.encode()) for line in second))
    reports += run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    assert latest_counts(kafka.bootstrap, out) == Counter(w for line in first + second for w in line.split())
    assert all(r.outcome == "ok" for r in reports), [(r.batch_id, r.outcome, r.error) for r in reports]
    # Every update of a count is visible once: counts of a word only ever go up.
    seen: dict[bytes, int] = {}
    for m in read_all(kafka.bootstrap, out):
        value = int.from_bytes(m.value(), "big")
        assert value > seen.get(m.key(), 0), m.key()
        seen[m.key()] = value
