"""An incompatible change of a running word count's store, on real Kafka and a local-cluster
(driver/upgrade_gate.py): refused under keepState, with nothing of the running version touched;
carried out under resetChangedState from `earliest`, where the store starts empty, is rebuilt
from the input from its beginning, and the counts come out exact, not doubled."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eddy_contract.spec import StreamAppSpec
from eddy_contract.topology import TOPOLOGY_KEY
from eddy_runtime.driver.channel_io import ChannelLocation
from eddy_runtime.driver.loop import Driver
from eddy_runtime.driver.options import DriverOptions
from eddy_runtime.driver.startup import load_pipeline
from eddy_runtime.driver.upgrade_gate import UpgradeRefused, gate_new_version
from eddy_runtime.protocol.placement import wait_for_executors
from tests.runtime.apps import latest_counts, produce, read_all, run_until_idle, streamapp

pytestmark = pytest.mark.integration

WORDS = [f"w{i:02d}" for i in range(40)]


@dataclass(frozen=True)
class RunningApp:
    """The word count's first version, run until its input is processed."""

    app: str
    source: str
    out: str
    words: Counter[str]
    state_dir: str
    runtime_state: Path
    bootstrap: str

    def spec(self, function: str, **upgrade: str) -> StreamAppSpec:
        return streamapp(self.app, self.bootstrap, "tests.runtime.upgrade_pipelines",
                         pipeline={"module": "tests.runtime.upgrade_pipelines", "function": function,
                                   "args": {"input_topic": self.source, "output_topic": self.out}},
                         processingGuarantee="exactly_once", state={"standbyReplicas": 1},
                         **({"upgrade": upgrade} if upgrade else {}))

    def driver(self, spark: Any, spec: StreamAppSpec, where: ChannelLocation, upgrade: Any) -> Driver:
        topology, module = load_pipeline(spec)
        return Driver(spark, spec, DriverOptions(state_dir=self.state_dir, per_executor_state_dirs=True,
                                                 runtime_state_target=where), topology, module, upgrade=upgrade)


@pytest.fixture(scope="module")
def word_count_v1(kafka, spark_session, tmp_path_factory) -> RunningApp:
    wait_for_executors(spark_session.sparkContext, 2, timeout=120)
    app = kafka.unique_name("reset")
    source = kafka.create_topic(f"{app}-words", partitions=4)
    words = [WORDS[(i * 7) % len(WORDS)] for i in range(2000)]
    produce(kafka.bootstrap, source, ((None, w.encode()) for w in words))
    home = tmp_path_factory.mktemp("reset")
    running = RunningApp(app, source, f"{app}-counts", Counter(words), str(home / "state"), home / "runtime.json",
                         kafka.bootstrap)
    where = ChannelLocation(path=str(running.runtime_state))
    run_until_idle(running.driver(spark_session, running.spec("counts_v1"), where, None))
    assert latest_counts(kafka.bootstrap, running.out) == running.words
    assert (home / TOPOLOGY_KEY).exists()
    return running


def ends(kafka, topics: list[str]) -> dict[str, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "ends"})
    try:
        return {f"{t}[{p}]": c.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
                for t in topics for p in range(4)}
    finally:
        c.close()


def test_keep_state_refuses_a_store_change_and_touches_nothing_of_the_running_version(kafka, word_count_v1,
                                                                                      tmp_path):
    running = word_count_v1
    # the first version's published topology, in a place of this test's own
    shutil.copy(running.runtime_state.with_name(TOPOLOGY_KEY), tmp_path / TOPOLOGY_KEY)
    where = ChannelLocation(path=str(tmp_path / "runtime.json"))
    changelog = f"{running.app}-counts-changelog"
    before = ends(kafka, [running.out, changelog])
    spec = running.spec("counts_v2", mode="keepState")
    with pytest.raises(UpgradeRefused, match="value serde"):
        gate_new_version(spec, load_pipeline(spec)[0], where)
    verdict = json.loads((tmp_path / "upgrade.json").read_text())
    assert verdict["allowed"] is False and "reset" not in verdict
    assert ends(kafka, [running.out, changelog]) == before
    assert json.loads((tmp_path / TOPOLOGY_KEY).read_text()) == json.loads(
        running.runtime_state.with_name(TOPOLOGY_KEY).read_text())


def test_reset_changed_state_rebuilds_the_changed_store_from_the_earliest_input_exactly(kafka, spark, word_count_v1):
    running = word_count_v1
    where = ChannelLocation(path=str(running.runtime_state))
    spec = running.spec("counts_v2", mode="resetChangedState", resetOffsets="earliest")
    decision = gate_new_version(spec, load_pipeline(spec)[0], where)
    assert decision is not None and decision.reset_stores == ("counts",)
    reports = run_until_idle(running.driver(spark, spec, where, decision))
    assert all(r.outcome == "ok" for r in reports), [(r.batch_id, r.outcome, r.error) for r in reports]

    # every word's latest count is the second version's (json), counted once from the beginning
    latest = {m.key().decode(): m.value() for m in read_all(kafka.bootstrap, running.out)}
    assert {word: json.loads(value) for word, value in latest.items()} == running.words
    verdict = json.loads(running.runtime_state.with_name("upgrade.json").read_text())
    assert verdict["allowed"] is True and verdict["reset"]["carriedOut"] is True
    assert verdict["reset"]["changelogsDeleted"] == [f"{running.app}-counts-changelog"]
    assert set(verdict["reset"]["positionsMoved"]) == {
        f"{t}[{p}]" for t in (running.source, f"{running.app}-words-repartition") for p in range(4)}
    # the second version runs now: its own topology is the one published
    assert gate_new_version(spec, load_pipeline(spec)[0], where).reset_stores == ()
