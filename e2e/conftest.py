"""Fixtures for the end-to-end tests: a one-node Kubernetes cluster whose pods really run (built
from Go modules, containerd and runc from Debian), the image built from the repository's
Dockerfile, a Kafka broker on the node's address, and the operator installed with its Helm chart.

Everything lives in the network namespace that `infra/cluster/netns.sh` made for this test
process (`make test-e2e`); pod and Service addresses never leave it.

`three_nodes` is a second cluster, of three real nodes (zone-a, zone-a, zone-b), for the tests
that need several nodes. Both clusters use the namespace's addresses and ports, so one runs at a
time: the tests that use `three_nodes` run first, and it stops after the last of them, before
any test starts the one-node cluster.

`wordcount` is the one-node cluster's word count that e2e/test_real_pods.py's tests and then
e2e/test_changes.py's run on, in that order (an app's start is a minute and more of the stage);
it goes after the last of them, before the other modules start apps of their own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.wordcount import WordCount, delete_namespace, deploy_word_count
from tests.conftest import servers_dir  # noqa: F401 - a fixture, used by name
from tests.servers import (
    KafkaBroker,
    NodeCluster,
    install_operator,
    kafka_broker,
    node_cluster,
)


@pytest.fixture(scope="session")
def node(servers_dir: Path) -> Iterator[NodeCluster]:  # noqa: F811 - the fixture imported above
    with node_cluster(servers_dir) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kafka(node: NodeCluster, servers_dir: Path) -> Iterator[KafkaBroker]:  # noqa: F811
    """The broker listens on the node's address: pods reach it there, and so does this process."""
    with kafka_broker(servers_dir, host=node.node_ip) as broker:
        yield broker


@pytest.fixture(scope="session")
def operator(node: NodeCluster) -> Iterator[NodeCluster]:
    """`helm install` of the chart, as the README says: the operator runs as a pod from the image."""
    install_operator(node)
    # No uninstall: the cluster goes with the session.
    yield node


# Each closed by pytest_runtest_teardown after the last test that uses its fixture (and again, to
# no effect, when the session ends).
_three_nodes_stop = contextlib.ExitStack()
THREE_NODES = "three_nodes"
_wordcount_stop = contextlib.ExitStack()
WORDCOUNT = "wordcount"
#: the modules that share `wordcount`, in the order they run on it: the first one's tests start
#: from the app as deployed, the second one's change it (a new image, a refused and a failed version)
WORDCOUNT_MODULES = ("test_real_pods.py", "test_changes.py")


@pytest.fixture(scope="session")
def wordcount(operator: NodeCluster, kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[WordCount]:
    """The word count on two executor pods, one standby per stateful task, exactly-once, talking
    SASL_SSL to the broker with its credentials in Secrets (as a user of a secured Kafka sets it
    up): deployed once for e2e/test_real_pods.py and then e2e/test_changes.py; the driver's log
    and both channel histories are kept when it goes."""
    app = deploy_word_count(operator, kafka, "wordcount-e2e", executors=2, standbys=1, listener="sasl_ssl")

    def close() -> None:
        try:
            app.close(tmp_path_factory.mktemp("wordcount"))
        finally:
            delete_namespace(operator, app.namespace)

    with _wordcount_stop:
        _wordcount_stop.callback(close)
        yield app


@pytest.fixture(scope="session")
def three_nodes(servers_dir: Path) -> Iterator[NodeCluster]:  # noqa: F811
    """Three real nodes (node.sh with EDDY_NODES=3): each its own kubelet, containerd, cgroup
    root, address (10.200.0.1-3) and pod range (10.244.0-2.0/24), zones zone-a, zone-a, zone-b;
    the control plane, CoreDNS and kube-proxy shared. Nodes go NotReady 20 s after their kubelet
    stops renewing its Lease. ``.kill_node(node)`` kills one for real."""
    with _three_nodes_stop:
        yield _three_nodes_stop.enter_context(node_cluster(servers_dir, nodes=3, name="nodes"))


#: the bare three-node cluster's module: it runs before the apps' on those nodes, and its last
#: test kills a node for good (node 2, zone-a): the apps run on the two nodes left, one per zone
BARE_NODES_MODULE = "test_nodes.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests on three nodes first (a stable sort), so that their cluster has stopped before
    the one-node cluster starts; among them, the bare cluster's first. On one node, the modules
    that share `wordcount` first, in their order."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if THREE_NODES in names and "node" in names:
            raise pytest.UsageError(f"{item.nodeid}: uses both clusters; only one can run at a time")
    items.sort(key=lambda item: (THREE_NODES not in getattr(item, "fixturenames", ()),
                                 item.path.name != BARE_NODES_MODULE,
                                 WORDCOUNT_MODULES.index(item.path.name) if item.path.name in WORDCOUNT_MODULES
                                 else len(WORDCOUNT_MODULES)))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    for name, stop in ((WORDCOUNT, _wordcount_stop), (THREE_NODES, _three_nodes_stop)):
        if name in getattr(item, "fixturenames", ()) and (
                nextitem is None or name not in getattr(nextitem, "fixturenames", ())):
            stop.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report shows each app it used as it was then (`WordCount.diagnosis`: its
    pods and the newest lines of its logs): CI keeps nothing else of a run."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    for name, value in (getattr(item, "funcargs", None) or {}).items():
        diagnosis = getattr(value, "diagnosis", None)
        if callable(diagnosis):
            try:
                report.sections.append((f"{name} when it failed", diagnosis()))
            except Exception as err:  # noqa: BLE001 - the report goes on without it
                report.sections.append((f"{name} when it failed", f"(no diagnosis: {err!r})"))
