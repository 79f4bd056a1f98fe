"""A node drained, then a whole zone lost, for real under a running app, on the real nodes of the
`three_nodes` cluster (docs/operations.md, "Draining a node" and "Node loss"): the word count with
two executors and one standby, the operator installed with its Helm chart (two replicas), Kafka on
node 1's address. These tests run after e2e/test_nodes.py, whose last test killed node 2: the app
runs on nodes 1 (zone-a) and 3 (zone-b), an executor on each (the executors spread over zones and
nodes), each task's standby in the other zone than its active.

Node 3 is drained with `kubectl drain` while input flows (with the driver and an operator replica
if they are there): the executors' budget refuses every eviction; the operator marks node 3's
executor leaving, its actives go to their caught-up standbys on node 1, and once the driver runs
that assignment the operator deletes the pod, which has handed them over; the drain then completes
on its own. No task fails over (no `ExecutorLost` with tasks), every line is counted. The node is
uncordoned after, and the executor comes back to its volume there. The driver is on node 1 after.

Then zone-b is lost: node 3, every node of that zone still up, is killed without warning
(``node.sh kill-node``: its kubelet, containerd and every container SIGKILLed, its pod network cut)
while input flows:

1. once its runner has not answered the operator's probes for 3 s (the chart's
   `failover.unreachableAfterSeconds`), well before the control plane marks the node NotReady
   (20 s without a Lease here), its executor counts as lost and its actives fail over to their
   standbys in zone-a: every task is served there, no record later than `FAILOVER_LATENESS_S`.
   Spark's driver hears nothing of the dead executor until the pod is deleted (its connections
   are dropped, not closed): the driver takes the operator's word and its batches run that
   generation within `DRIVER_TAKES_S`, not waiting on a job pinned to the dead executor;
2. once the node has been NotReady for `spec.state.nodeLossTimeout` (30 s here), the operator
   deletes the pod (it cannot be stopped gracefully: its kubelet is gone) and releases its claim
   (the volume lives only on the dead node): a `NodeLost` Event says so;
3. the StatefulSet makes the executor again on a live node, with a new claim bound to a volume of
   that node; it restores from the changelog as a warmup and holds copies again;
4. every line sent through it was counted, the counts exact after.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.wordcount import APP, Flow, WordCount, deploy_word_count, until
from eddy_operator import builders
from tests.operator.cluster import report
from tests.servers import NodeCluster, install_operator, kafka_broker

pytestmark = pytest.mark.e2e

NAMESPACE = "wordcount-node-loss"
#: well after the node is NotReady, so that the failover (at NotReady) and the release are apart
NODE_LOSS_TIMEOUT_S = 30
#: kubectl drain's own limit: the driver's restart on another node (when the drained node had it),
#: then the executor's hand-over once the new driver has taken over
DRAIN_WITHIN_S = 300
#: a record's lateness during the drain: as across a driver restart (e2e/test_changes.py), since
#: the driver may be on the drained node
DRAIN_LATENESS_S = 5.0
#: a record's lateness across the zone's loss: 3 s of silence before the executor counts as lost,
#: then the failover; NotReady comes only 20 s after the kill
FAILOVER_LATENESS_S = 10.0
#: the operator's failover generation published to the driver's batches running it (a batch
#: pinned to the dead executor is cancelled on the operator's word: Spark still counts it alive)
DRIVER_TAKES_S = 20.0
#: kill to NotReady (20 s without a Lease, checked every 2 s) + the timeout + a new pod scheduled,
#: its JVM up and registered with the driver, on the loaded 2-core machine
REMADE_WITHIN_S = 300


@pytest.fixture(scope="module")
def app(three_nodes: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WordCount]:
    # a broker of its own (the one-node cluster's starts after these nodes stop), on node 1's
    # address, which stays up when a node is killed (it carries the control plane)
    with kafka_broker(tmp_path_factory.mktemp("kafka-nodes"), host=three_nodes.node_ip) as kafka:
        install_operator(three_nodes)
        wc = deploy_word_count(three_nodes, kafka, NAMESPACE, executors=2, standbys=1,
                               state__nodeLossTimeout=f"{NODE_LOSS_TIMEOUT_S}s")
        with wc.serving(lambda: tmp_path_factory.mktemp("wordcount-node-loss")):
            yield wc


def _drain(three_nodes: NodeCluster, node: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(three_nodes.bin_dir / "kubectl"), "--kubeconfig", str(three_nodes.kubeconfig), "drain", node,
         "--ignore-daemonsets", "--delete-emptydir-data", "--force", f"--timeout={DRAIN_WITHIN_S}s"],
        capture_output=True, text=True, timeout=DRAIN_WITHIN_S + 60)


def _zone_b(three_nodes: NodeCluster) -> str:
    """The one node of zone-b, which is up: node 3."""
    (node,) = [n.name for n in three_nodes.nodes if n.zone == "zone-b"]
    return node


@pytest.mark.timeout(1200)
def test_a_drain_waits_for_warm_copies_and_completes_without_a_failover(three_nodes: NodeCluster,
                                                                         app: WordCount) -> None:
    app.steady()
    node = _zone_b(three_nodes)
    on_node = [p for p in app.executor_pods() if p.spec.node_name == node]
    assert len(on_node) == 1, f"one executor on {node}: {[(p.metadata.name, p.spec.node_name) for p in on_node]}"
    drained = on_node[0]
    held = app.steady()
    (executor,) = [e.id for e in held.executors if e.pod == drained.metadata.name]
    actives = held.assignment.active_tasks(executor)
    assert actives, f"executor {executor} on {node} holds no active: {held.assignment}"
    flow = Flow(app).start()
    time.sleep(3)
    t0 = time.monotonic()
    done = _drain(three_nodes, node)
    took = time.monotonic() - t0
    try:
        assert done.returncode == 0, f"kubectl drain {node} failed after {took:.0f}s: {done.stdout}{done.stderr}"
        gone = app.pod(drained.metadata.name)
        assert gone is None or gone.metadata.uid != drained.metadata.uid, "the drained executor pod is still there"
        refused = done.stdout.count("disruption budget") + done.stderr.count("disruption budget")
        flow.stop()
        late = flow.lateness(t0)
        said = [m for m in app.events("Draining") if drained.metadata.name in m]
        # the operator posts its Events after the delete, in the background: the drain may end first
        try:
            deleted = until(lambda: [m for m in app.events("ExecutorDrained") if drained.metadata.name in m], 20,
                            f"the ExecutorDrained Event of {drained.metadata.name}", interval=1)
        except AssertionError:
            deleted = []
        assert said and deleted, (f"{app.kubectl('describe', 'sapp', APP)[-3000:]}\nkubectl drain said: "
                                  f"{done.stdout[-1500:]}{done.stderr[-1500:]}")
        # the actives were handed over while the pod ran: none failed over
        failed_over = [m for m in app.events("ExecutorLost") if " 0 active task(s)" not in m]
        assert not failed_over, failed_over
        assert late[-1] <= DRAIN_LATENESS_S, (f"a record was {late[-1]:.2f}s late during the drain: "
                                              f"{flow.describe_lateness(t0)}")
    finally:
        three_nodes.kubectl("uncordon", node)
    back = until(lambda: _ready_again(app, drained.metadata.name, node), 300,
                 f"{drained.metadata.name} back on {node}", alive=app.check_driver)
    assert app.claim_of(back).metadata.uid == app.claim_of(drained).metadata.uid
    app.steady()
    app.counted_everything(400, "every record counted after the drain")
    report(f"node {node} drained in {took:.0f}s ({refused} evictions refused by the budget meanwhile), "
           f"its executor's {len(actives)} actives handed over; "
           f"{said[0][:160]} / {deleted[0][:160]}; lateness of {len(late)} records: p50 {late[len(late) // 2]:.2f}s, "
           f"max {late[-1]:.2f}s ({flow.describe_lateness(t0, over=1.0)})")


def _ready_again(app: WordCount, name: str, node: str) -> Any | None:
    pod = app.pod(name)
    if pod is None or pod.spec.node_name != node or pod.metadata.deletion_timestamp is not None:
        return None
    return pod if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []) else None


@pytest.mark.timeout(1200)
def test_a_lost_zones_executor_fails_over_to_the_other_zone_and_is_made_again_there_with_a_fresh_volume(
        three_nodes: NodeCluster, app: WordCount) -> None:
    steady = app.steady()
    driver = app.pod(builders.driver_pod_name(APP))
    assert driver is not None
    dead = three_nodes.node(_zone_b(three_nodes))
    # the drain before moved the driver off zone-b (a lost driver is the driver restart's story)
    assert driver.spec.node_name != dead.name, driver.spec.node_name
    (lost,) = [p for p in app.executor_pods() if p.spec.node_name == dead.name]
    # standbys across zones: every stateful task has a copy in each zone (a stateless one, nothing
    # to restore, goes wherever there is room)
    zones = {e.id: e.zone for e in steady.executors}
    stateful = {t: placed for t, placed in steady.assignment.tasks.items() if placed.standbys}
    assert stateful
    for task, placed in stateful.items():
        assert {zones[e] for e in placed.copies} == {"zone-a", "zone-b"}, (task, placed, zones)
    old_claim = app.claim_of(lost)
    flow = Flow(app).start()
    time.sleep(3)
    t0 = time.monotonic()
    killed = three_nodes.kill_node(dead)
    (lost_id,) = [e.id for e in steady.executors if e.pod == lost.metadata.name]
    failover = until(lambda: next((m for m in app.channel.assignments
                                   if m.assignment.generation > steady.assignment.generation
                                   and lost_id not in {e.id for e in m.executors}), None), 120,
                     f"an assignment without executor {lost_id}", alive=app.check_driver)
    dropped_at = time.monotonic()
    until(lambda: (s := app.channel.runtime_state()) is not None
          and s.assignment_generation >= failover.assignment.generation, DRIVER_TAKES_S,
          f"the driver's batches on generation {failover.assignment.generation}, the failover",
          alive=app.check_driver)
    taken_after = time.monotonic() - dropped_at

    said = until(lambda: [m for m in app.events("NodeLost") if lost.metadata.name in m], 180,
                 f"the NodeLost Event of {lost.metadata.name}", alive=app.check_driver)
    released_after = time.monotonic() - t0
    pod = until(lambda: app.remade(lost, dead.name), REMADE_WITHIN_S,
                f"{lost.metadata.name} made again and ready on a live node", alive=app.check_driver)
    remade_after = time.monotonic() - t0
    claim = app.claim_of(pod)
    assert claim.metadata.uid != old_claim.metadata.uid, "the claim of the dead node's volume was kept"
    volume = app.core.read_persistent_volume(claim.spec.volume_name)
    pinned = volume.spec.node_affinity.required.node_selector_terms[0].match_expressions[0].values
    assert pinned == [pod.spec.node_name], (pinned, pod.spec.node_name)
    flow.stop()
    late = flow.lateness(t0)
    app.steady()  # every standby caught up: the new volume restored from the changelog
    caught_up_after = time.monotonic() - t0
    app.counted_everything(400, "every record counted after the node loss")
    story = app.kubectl("describe", "sapp", APP)
    assert "NodeLost" in story and "not answering the operator's probes" in story, story[-3000:]
    # the actives failed over once the runner fell silent, not when the node went NotReady, nor
    # once its pod was deleted
    assert late[-1] < FAILOVER_LATENESS_S, (f"a record was {late[-1]:.1f}s late, the pod deleted "
                                            f"{released_after:.0f}s after the kill: {flow.describe_lateness(t0)}")
    report(f"node {dead.name} killed ({killed}); failover generation {failover.assignment.generation} run by the "
           f"driver's batches {taken_after:.1f}s after it was published; NodeLost after {released_after:.0f}s: "
           f"{said[0][:200]}; "
           f"{lost.metadata.name} ready on {pod.spec.node_name} after {remade_after:.0f}s, caught up after "
           f"{caught_up_after:.0f}s; lateness of {len(late)} records: p50 {late[len(late) // 2]:.2f}s, "
           f"max {late[-1]:.2f}s ({flow.describe_lateness(t0)})")
