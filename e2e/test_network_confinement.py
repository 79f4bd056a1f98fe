"""The real-pod cluster's addresses stay inside the network namespace this run made: there is
no route out of it, and it is not the host's namespace."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.servers import NodeCluster

pytestmark = pytest.mark.e2e


def route_to(address: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "route", "get", address], capture_output=True, text=True, timeout=10)


def test_the_cluster_runs_in_a_network_namespace_of_its_own(node: NodeCluster):
    assert os.readlink("/proc/self/ns/net") != os.readlink("/proc/1/ns/net"), "running in the host's namespace"
    # The node address and the Service range are routed locally; pods sit behind the CNI bridge.
    assert route_to(node.node_ip).returncode == 0
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    names = {line.split(":")[1].strip().split("@")[0] for line in links.splitlines()}
    assert "lo" in names and not any(n.startswith(("eth", "ens", "enp", "wl")) for n in names), names


@pytest.mark.parametrize("address", ["1.1.1.1", "10.99.99.99", "172.16.0.1", "192.168.0.1"])
def test_no_address_outside_the_namespace_has_a_route(node: NodeCluster, address: str):
    proc = route_to(address)
    assert proc.returncode != 0 and "unreachable" in proc.stderr.lower(), (proc.stdout, proc.stderr)
