"""A node lost for real under a running app, on the real nodes of the `three_nodes` cluster
(docs/operations.md, "Node loss"): the word count with two executors and one standby, the operator
installed with its Helm chart (two replicas), Kafka on node 1's address. These tests run after
e2e/test_nodes.py, whose last test killed node 3: the app runs on nodes 1 and 2.

A node that runs an executor is killed without warning (``node.sh kill-node``: its kubelet,
containerd and every container SIGKILLed, its pod network cut) while input flows:

1. once the control plane marks the node NotReady (20 s without a Lease here), its executor counts
   as lost and its actives fail over to their standbys on the other node;
2. once the node has been NotReady for `spec.state.nodeLossTimeout` (30 s here), the operator
   deletes the pod (it cannot be stopped gracefully: its kubelet is gone) and releases its claim
   (the volume lives only on the dead node): a `NodeLost` Event says so;
3. the StatefulSet makes the executor again on a live node, with a new claim bound to a volume of
   that node; it restores from the changelog as a warmup and holds copies again;
4. every line sent through it was counted, the counts exact after.
"""

from __future__ import annotations

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


def _remade(app: WordCount, lost: Any, dead_node: str) -> Any | None:
    """The pod made again under `lost`'s name, once it runs ready on a live node."""
    pod = app.pod(lost.metadata.name)
    if pod is None or pod.metadata.uid == lost.metadata.uid or pod.spec.node_name in (None, dead_node):
        return None
    ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    return pod if ready else None


@pytest.mark.timeout(1200)
def test_a_lost_nodes_executor_fails_over_and_is_made_again_on_a_live_node_with_a_fresh_volume(
        three_nodes: NodeCluster, app: WordCount):
    app.steady()
    driver = app.pod(builders.driver_pod_name(APP))
    assert driver is not None
    executors = app.executor_pods()
    # an executor's node without the driver where there is one (a lost driver is the driver
    # restart's story: e2e/test_changes.py)
    lost = next((p for p in executors if p.spec.node_name != driver.spec.node_name), executors[0])
    dead = three_nodes.node(lost.spec.node_name)
    old_claim = app.claim_of(lost)
    flow = Flow(app).start()
    time.sleep(3)
    t0 = time.monotonic()
    killed = three_nodes.kill_node(dead)

    said = until(lambda: [m for m in app.events("NodeLost") if lost.metadata.name in m], 180,
                 f"the NodeLost Event of {lost.metadata.name}", alive=app.check_driver)
    released_after = time.monotonic() - t0
    pod = until(lambda: _remade(app, lost, dead.name), REMADE_WITHIN_S,
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
    assert "NodeLost" in story and "on a node that is down" in story, story[-3000:]
    # the actives failed over when the node went NotReady, not only once its pod was deleted
    assert late[-1] < released_after, (f"a record was {late[-1]:.1f}s late, the pod deleted {released_after:.0f}s "
                                       f"after the kill: {flow.describe_lateness(t0)}")
    report(f"node {dead.name} killed ({killed}); NodeLost after {released_after:.0f}s: {said[0][:200]}; "
           f"{lost.metadata.name} ready on {pod.spec.node_name} after {remade_after:.0f}s, caught up after "
           f"{caught_up_after:.0f}s; lateness of {len(late)} records: p50 {late[len(late) // 2]:.2f}s, "
           f"max {late[-1]:.2f}s ({flow.describe_lateness(t0)})")
