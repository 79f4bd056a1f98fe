"""Fixtures for the end-to-end tests: a one-node Kubernetes cluster whose pods really run (built
from Go modules, containerd and runc from Debian), the image built from the repository's
Dockerfile, a Kafka broker on the node's address, and the operator installed with its Helm chart.

Everything lives in the network namespace that `infra/cluster/netns.sh` made for this test
process (`make test-e2e`); pod and Service addresses never leave it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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
