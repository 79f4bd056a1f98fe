"""The real-pod cluster's addresses stay inside the network namespace this run made: there is
no route out of it, and it is not the host's namespace."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.servers import NodeCluster

pytestmark = pytest.mark.e2e


def route_to(address: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "route", "get", address], capture_output=True, text=True, timeout=10)


def ancestors_network_namespaces() -> list[str]:
    """The network namespace of each ancestor of this process (netns.sh's outer half runs in the
    namespace the run started from)."""
    out, pid = [], os.getppid()
    while pid > 1:
        try:
            out.append(os.readlink(f"/proc/{pid}/ns/net"))
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    return out


def test_the_cluster_runs_in_a_network_namespace_of_its_own(node: NodeCluster):
    own = os.readlink("/proc/self/ns/net")
    assert any(ns != own for ns in ancestors_network_namespaces()), "not started from another namespace"
    # The node address and the Service range are routed locally; pods sit behind the CNI bridge.
    assert route_to(node.node_ip).returncode == 0
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True, timeout=10).stdout
    names = {line.split(":")[1].strip().split("@")[0] for line in links.splitlines()}
    assert "lo" in names and not any(n.startswith(("eth", "ens", "enp", "wl")) for n in names), names


@pytest.mark.parametrize("address", ["1.1.1.1", "10.99.99.99", "172.16.0.1", "192.168.0.1"])
def test_no_address_outside_the_namespace_has_a_route(node: NodeCluster, address: str):
    proc = route_to(address)
    assert proc.returncode != 0 and "unreachable" in proc.stderr.lower(), (proc.stdout, proc.stderr)
