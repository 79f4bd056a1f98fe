"""Word count with repartitioning on real Kafka and a local-cluster: exact counts under exactly-once."""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from eddy_contract.channel import RUNTIME_STATE_KEY, RuntimeState, decode_runtime_state
from eddy_runtime.driver.channel_io import ChannelLocation
from tests.runtime.apps import driver_for, latest_counts, produce, read_all, run_until_idle, streamapp

pytestmark = pytest.mark.integration

WORDS = [f"w{i:02d}" for i in range(60)]


def published(where: ChannelLocation) -> RuntimeState:
    assert where.path is not None
    return decode_runtime_state({RUNTIME_STATE_KEY: Path(where.path).read_text()})


def assert_load(where: ChannelLocation, processed: int) -> RuntimeState:
    """The published runtime state, whose executors' load counts about the `processed` records
    its actives read, and busy time that is more than nothing and less than the wall time since
    the counters started."""
    state = published(where)
    assert state.load.keys() == state.executors.keys() and state.load_since is not None
    # every record once at most (a count only when its commit went through), and few left out: a
    # round under a generation replaced meanwhile, or a sync whose answer came too late, is not counted
    assert 0.9 * processed <= sum(load.records for load in state.load.values()) <= processed, state.load
    wall = (datetime.fromisoformat(state.updated_at) - datetime.fromisoformat(state.load_since)).total_seconds()
    for executor, load in state.load.items():
        assert load.records == 0 or 0.0 < load.busy_s < wall, (executor, load, wall)
    return state


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
    where = ChannelLocation(path=str(tmp_path / "runtime-state.json"))
    driver = driver_for(spark, spec, str(tmp_path / "state"), runtime_state_target=where)
    states: list[RuntimeState] = []
    reports = run_until_idle(driver, on_batch=lambda _: states.append(published(where)))
    assert driver.continuous_subtopologies == ({1} if execution == "continuous" else set())
    assert latest_counts(kafka.bootstrap, out) == Counter(w for line in first for w in line.split())
    # the actives read every line, then every record of the repartition topic (each combines a
    # batch's counts of one word, so there are fewer of them than words)
    repartitioned = len(read_all(kafka.bootstrap, f"{app}-words-repartition"))
    load = assert_load(where, processed=len(first) + repartitioned)
    # the last batches found no input: waiting for it kept no executor busy
    assert states[-1].load == states[-2].load == load.load

    # A second run of the same app resumes from its committed offsets and its stores.
    produce(kafka.bootstrap, source, ((None, line.encode()) for line in second))
    reports += run_until_idle(driver_for(spark, spec, str(tmp_path / "state"), runtime_state_target=where))
    assert latest_counts(kafka.bootstrap, out) == Counter(w for line in first + second for w in line.split())
    # a new driver counts anew, from its own start
    again = assert_load(where, processed=len(second) - repartitioned
                        + len(read_all(kafka.bootstrap, f"{app}-words-repartition")))
    assert again.load_since is not None and load.load_since is not None
    assert datetime.fromisoformat(again.load_since) > datetime.fromisoformat(load.load_since)
    assert all(r.outcome == "ok" for r in reports), [(r.batch_id, r.outcome, r.error) for r in reports]
    # Every update of a count is visible once: counts of a word only ever go up.
    seen: dict[bytes, int] = {}
    for m in read_all(kafka.bootstrap, out):
        value = int.from_bytes(m.value(), "big")
        assert value > seen.get(m.key(), 0), m.key()
        seen[m.key()] = value
