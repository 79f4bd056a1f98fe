"""A short fault campaign (bench/chaos.py, docs/reliability.md) on the `three_nodes` cluster: the
campaign app (examples/chaos: a stream-table join, a repartition hop, windows; exactly-once, one
standby) on three brokers (RF 3, min.insync.replicas 2), fed a steady rate of known events, while
a seeded schedule injects one fault of every kind but a node's loss, one after the other, each
into an app whole again after the last (`Settings.healthy_between`; the long campaign lets them
overlap): executor pods deleted, an executor's JVM and task runner SIGKILLed, the driver pod
deleted, the operator's leader SIGKILLed, a broker SIGKILLed and restarted, an executor cut off
from the brokers. A node's loss is the e2e stage's costliest fault (129-150 s until records were
on time again, 174-201 s until the app was whole, in the two runs of 2026-11-29): it is left to
e2e/test_nodes.py (a node killed and restarted) and e2e/test_node_loss.py (a zone's executor
lost), and to the long campaign, which loses a node 8 times. Then:

- the verifier reads every output to its end (read_committed): every join record once, every
  window's count exact and its updates increasing, nothing unexpected (0 lost, 0 duplicated);
- every fault recovered: records on time (the steady p99) again before the next one;
- what Eddy reported (ExecutorLost and NodeLost Events, status.lastFailover and executor counts,
  the operator's and the driver's counters) matches what was injected.

The long campaign (56 faults) is `make chaos`. This module runs after e2e/test_nodes.py (node 2
is down for good by then) and before e2e/test_node_loss.py, whose apps the operator it installed
goes on to run. With the node's loss, its setup took 617-636 s (2026-11-29, here and in CI):
the app's start, 20 s of warm-up, the faults with their settling (the driver's adoption of its
pods the longest now), the wait for every executor to be ready again, the verification.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.chaos import NAMESPACE, Settings, run_campaign
from bench.chaos_report import KINDS, Report
from e2e.wordcount import delete_namespace
from tests.operator.cluster import report as say
from tests.servers import NodeCluster, install_operator, kafka_nodes

pytestmark = pytest.mark.e2e

#: one fault of every kind but a node's loss (CI's budget: the long campaign is `make chaos`)
SHORT_KINDS = tuple(k for k in KINDS if k != "node-lost")
FAULTS = len(SHORT_KINDS)
SEED = 32


@pytest.fixture(scope="module")
def campaign(three_nodes: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Report]:
    out = tmp_path_factory.mktemp("chaos")
    with kafka_nodes(tmp_path_factory.mktemp("kafka-chaos"), nodes=3, host=three_nodes.node_ip) as kafka:
        install_operator(three_nodes)
        try:
            yield run_campaign(three_nodes, kafka, Settings(
                seed=SEED, faults=FAULTS, kinds=SHORT_KINDS, rate=20.0, warmup_s=20.0, gap_s=(2.0, 4.0),
                settle_timeout_s=300.0, drain_timeout_s=300.0, healthy_between=True, out=Path(out),
                command=f"e2e/test_chaos.py (seed {SEED}, {FAULTS} faults)"))
        finally:
            delete_namespace(three_nodes, NAMESPACE)


@pytest.mark.timeout(1500)
def test_a_short_campaign_of_every_fault_kind_but_a_node_s_loss_loses_and_duplicates_nothing(campaign: Report) -> None:
    say("\n" + campaign.text())
    assert {f.kind for f in campaign.faults} == set(SHORT_KINDS), campaign.notes
    assert campaign.ok, campaign.verdict_text
    assert campaign.verdict["lost"] == 0 and campaign.verdict["duplicated"] == 0


@pytest.mark.timeout(60)
def test_every_fault_of_the_short_campaign_recovered_before_the_next(campaign: Report) -> None:
    slow = [(f.kind, f.target) for f in campaign.faults if f.recovery_s is None]
    assert not slow, f"never on time again after {slow}"


@pytest.mark.timeout(60)
def test_what_eddy_reported_matches_the_faults_injected(campaign: Report) -> None:
    assert not campaign.mismatches, "\n".join(campaign.mismatches)
