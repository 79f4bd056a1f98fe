"""Three real nodes (the `three_nodes` cluster: infra/cluster/node.sh with EDDY_NODES=3), the
ground the node-loss tests stand on. Each node has its own kubelet, containerd, cgroup root,
address and pod range; the control plane, CoreDNS and kube-proxy are shared. These tests show:

1. three Ready nodes, each on its own address and pod range, labelled zone-a, zone-a, zone-b,
   with local PersistentVolumes of their own;
2. the scheduler spreads a Deployment over the three nodes, and a pod on one node reaches the
   pods on the others over the pod network, and all of them through a Service by its DNS name;
3. a claim binds a volume of the node its pod was scheduled on, and the pod writes to it;
4. a node killed without warning (``node.sh kill-node``: SIGKILL to its kubelet, containerd,
   shims and containers) leaves nothing of it running, its pods stop answering, and the control
   plane marks it NotReady within NOT_READY_WITHIN_S while the other two stay Ready.

The echo pods run the Eddy image (imported into every node, never pulled) with a few lines of
Python that answer each GET with their node's and their own name.
"""

from __future__ import annotations

import ipaddress
import json
import os
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.operator.cluster import report
from tests.servers import ClusterNode, NodeCluster

pytestmark = pytest.mark.e2e

NAMESPACE = "nodes-e2e"
# node.sh's default zones for three nodes: the first two in zone-a, the third in zone-b.
EXPECTED_ZONES = ["zone-a", "zone-a", "zone-b"]
# The controller-manager marks a node NotReady (Ready Unknown) 20 s (--node-monitor-grace-period)
# after its last Lease renewal (every 5 s), checking every 2 s: ~20-27 s; the rest is margin for
# a loaded machine.
NOT_READY_WITHIN_S = 60
ECHO_PORT = 8080

ECHO_SERVER = textwrap.dedent("""\
    import http.server, os
    class Echo(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"{os.environ['NODE_NAME']} {os.environ['POD_NAME']}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    http.server.ThreadingHTTPServer(("", %d), Echo).serve_forever()
    """) % ECHO_PORT


def image() -> str:
    cache = Path(os.environ.get("EDDY_CACHE", Path(__file__).resolve().parent.parent / ".cache"))
    for line in (cache / "images" / "images.env").read_text().splitlines():
        if line.startswith("EDDY_IMAGE="):
            return line.split("=", 1)[1]
    raise AssertionError("no EDDY_IMAGE in images.env")


def kubectl_json(cluster: NodeCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def until(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(interval)


def ready(node_object: dict[str, Any]) -> str:
    """The status of a Node's Ready condition: True, False or Unknown (a silent kubelet)."""
    return next(c["status"] for c in node_object["status"]["conditions"] if c["type"] == "Ready")


def get(cluster: NodeCluster, pod: str, url: str, timeout_s: float = 5) -> str:
    """GET `url` from inside `pod` (its own network namespace, on its node's bridge); the body,
    or "error: ..." when it fails."""
    script = ("import sys, urllib.request\n"
              "try:\n"
              f"    print(urllib.request.urlopen(sys.argv[1], timeout={timeout_s}).read().decode())\n"
              "except Exception as e:\n"
              "    print('error:', repr(e))\n")
    return cluster.kubectl("-n", NAMESPACE, "exec", pod, "--", "python3", "-c", script, url).stdout.strip()


def daemons_of(cluster: NodeCluster, node: ClusterNode) -> dict[int, str]:
    """The node's kubelet and containerd: PID -> program name."""
    programs = {pid: Path(cmd.split()[0]).name for pid, cmd in cluster.processes_of(node).items() if cmd}
    return {pid: name for pid, name in programs.items() if name in ("kubelet", "containerd")}


def echo_manifests() -> str:
    container = {
        "name": "echo", "image": image(), "imagePullPolicy": "Never",
        "command": ["python3", "-c", ECHO_SERVER],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"containerPort": ECHO_PORT}],
        "readinessProbe": {"httpGet": {"path": "/", "port": ECHO_PORT}, "periodSeconds": 1},
    }
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "echo", "namespace": NAMESPACE},
        "spec": {
            "replicas": 3, "selector": {"matchLabels": {"app": "echo"}},
            "template": {"metadata": {"labels": {"app": "echo"}}, "spec": {
                "terminationGracePeriodSeconds": 1,
                # One pod per node: the scheduler has to use all three.
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "echo"}}, "topologyKey": "kubernetes.io/hostname"}]}},
                "containers": [container]}},
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo", "namespace": NAMESPACE},
        "spec": {"selector": {"app": "echo"}, "ports": [{"port": 80, "targetPort": ECHO_PORT}]},
    }
    return "\n---\n".join(json.dumps(m) for m in (deployment, service))


@pytest.fixture(scope="module")
def echo(three_nodes: NodeCluster) -> Iterator[dict[str, dict[str, Any]]]:
    """The echo Deployment's three Ready pods, by node name."""
    cluster = three_nodes
    cluster.kubectl("create", "namespace", NAMESPACE)
    cluster.kubectl("apply", "-f", "-", input=echo_manifests())
    t0 = time.monotonic()
    cluster.kubectl("-n", NAMESPACE, "rollout", "status", "deployment/echo", "--timeout=180s")
    pods = kubectl_json(cluster, "-n", NAMESPACE, "get", "pods", "-l", "app=echo")["items"]
    report(f"\nthe echo Deployment's 3 pods Ready {time.monotonic() - t0:.1f} s after its rollout began")
    yield {p["spec"]["nodeName"]: p for p in pods}
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def test_three_nodes_are_ready_on_their_own_addresses_in_two_zones(three_nodes: NodeCluster):
    cluster = three_nodes
    nodes = {n["metadata"]["name"]: n for n in kubectl_json(cluster, "get", "nodes")["items"]}
    assert sorted(nodes) == ["eddy-node-1", "eddy-node-2", "eddy-node-3"]
    assert [n.name for n in cluster.nodes] == sorted(nodes)
    for node, zone in zip(cluster.nodes, EXPECTED_ZONES, strict=True):
        obj = nodes[node.name]
        assert ready(obj) == "True", obj["status"]["conditions"]
        assert obj["metadata"]["labels"]["topology.kubernetes.io/zone"] == zone
        addresses = {a["type"]: a["address"] for a in obj["status"]["addresses"]}
        assert addresses["InternalIP"] == node.address == f"10.200.0.{node.index}"
        assert obj["spec"]["podCIDR"] == node.pod_cidr == f"10.244.{node.index - 1}.0/24"
    # Each node is its own kubelet and containerd, in a directory and cgroup root of its own.
    assert len({n.dir for n in cluster.nodes}) == len({n.cgroup for n in cluster.nodes}) == 3
    for node in cluster.nodes:
        daemons = sorted(daemons_of(cluster, node).values())
        assert daemons == ["containerd", "kubelet"], (node.name, daemons)
    # Local volumes of their own, bound to their node by node affinity.
    pvs = kubectl_json(cluster, "get", "pv", "-l", "eddy.local/volume=true")["items"]
    per_node: Counter[str] = Counter()
    for pv in pvs:
        (term,) = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        (owner,) = term["matchExpressions"][0]["values"]
        assert pv["spec"]["local"]["path"].startswith(f"{cluster.node(owner).dir}/volumes/"), pv["spec"]
        per_node[owner] += 1
    assert per_node == {n.name: int(cluster.env["PVS"]) for n in cluster.nodes}


def test_pods_spread_over_the_nodes_and_reach_each_other_across_them(
        three_nodes: NodeCluster, echo: dict[str, dict[str, Any]]):
    cluster = three_nodes
    assert sorted(echo) == [n.name for n in cluster.nodes], "one echo pod per node"
    for name, pod in echo.items():
        assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(cluster.node(name).pod_cidr)
    # From each node's pod to the pods on the two other nodes, straight over the pod network.
    for source, pod in echo.items():
        for target, other in echo.items():
            if target != source:
                answer = get(cluster, pod["metadata"]["name"], f"http://{other['status']['podIP']}:{ECHO_PORT}/")
                assert answer == f"{target} {other['metadata']['name']}", (source, target, answer)
    # Through the Service, by its DNS name (CoreDNS, kube-proxy's rules): every node's pod answers.
    last = echo[cluster.nodes[-1].name]["metadata"]["name"]
    script = ("import collections, json, urllib.request\n"
              f"url = 'http://echo.{NAMESPACE}.svc.cluster.local/'\n"
              "print(json.dumps(collections.Counter(urllib.request.urlopen(url, timeout=5).read().decode().split()[0]"
              " for _ in range(40))))\n")
    # kube-proxy programs an endpoint a moment after its pod is Ready (the EndpointSlice changes,
    # then the proxy's next sync): until it has, a Service answers from fewer pods. CI saw 40
    # answers from two of the three nodes right after the rollout.
    answers: list[dict[str, int]] = []

    def every_node_answers() -> bool:
        answers.append(json.loads(cluster.kubectl("-n", NAMESPACE, "exec", last, "--", "python3", "-c", script).stdout))
        return set(answers[-1]) == {n.name for n in cluster.nodes}

    try:
        until(every_node_answers, 30, "the Service to answer from every node's pod", interval=1)
    except AssertionError as err:
        raise AssertionError(f"{err}; answers by node, per try: {answers}") from None
    report(f"\nthe Service answered from every node's pod at try {len(answers)}: {answers}")


def test_a_claim_binds_a_volume_of_the_node_its_pod_is_scheduled_on(three_nodes: NodeCluster):
    cluster = three_nodes
    node = cluster.nodes[1]
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "default"},
             "spec": {"accessModes": ["ReadWriteOncePod"], "resources": {"requests": {"storage": "1Gi"}}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "writer", "namespace": "default"},
           "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node.name},
                    "securityContext": {"runAsUser": 185, "fsGroup": 185},
                    "containers": [{"name": "w", "image": image(), "imagePullPolicy": "Never",
                                    "command": ["python3", "-c",
                                                "open('/data/written-by', 'w').write(__import__('os').environ['N'])"],
                                    "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(m) for m in (claim, pod)))
    try:
        until(lambda: kubectl_json(cluster, "get", "pod", "writer")["status"].get("phase") in ("Succeeded", "Failed"),
              120, "the writer pod to finish")
        assert kubectl_json(cluster, "get", "pod", "writer")["status"]["phase"] == "Succeeded"
        pv = kubectl_json(cluster, "get", "pv", kubectl_json(cluster, "get", "pvc", "data")["spec"]["volumeName"])
        assert pv["metadata"]["labels"]["eddy.local/node"] == node.name
        path = Path(pv["spec"]["local"]["path"])
        assert path.parent == node.dir / "volumes"
        assert (path / "written-by").read_text() == node.name
    finally:
        cluster.kubectl("delete", "pod", "writer", "--wait=false", check=False)
        cluster.kubectl("delete", "pvc", "data", "--wait=false", check=False)


def gone(pids: set[int]) -> set[int]:
    """Those of `pids` that still run (zombies count as gone)."""
    alive = set()
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                alive.add(pid)
        except (OSError, IndexError):
            pass
    return alive


def test_a_killed_node_leaves_nothing_running_and_goes_not_ready(
        three_nodes: NodeCluster, echo: dict[str, dict[str, Any]]):
    cluster = three_nodes
    # node 2 (zone-a): the apps' modules after this one run on nodes 1 and 3, one in each zone
    victim: ClusterNode = cluster.nodes[1]
    survivors = [n for n in cluster.nodes if n != victim]
    before = cluster.processes_of(victim)
    in_containers = {pid for pid, cmd in before.items() if ECHO_SERVER.splitlines()[0] in cmd}
    assert in_containers, f"the echo pod's process on {victim.name} is not among {before}"
    assert any("containerd-shim" in cmd for cmd in before.values()), before
    others_before = {n.name: set(daemons_of(cluster, n)) for n in survivors}
    source = echo[survivors[0].name]["metadata"]["name"]
    victim_ip = echo[victim.name]["status"]["podIP"]
    assert get(cluster, source, f"http://{victim_ip}:{ECHO_PORT}/").startswith(victim.name)

    t0 = time.monotonic()
    said = cluster.kill_node(victim)
    killed_in = time.monotonic() - t0
    assert gone(set(before)) == set(), f"still running after kill-node: {gone(set(before))}"
    assert cluster.processes_of(victim) == {}
    # Only that node: the others' kubelets and containerds still run.
    for node in survivors:
        assert gone(others_before[node.name]) == others_before[node.name], node.name
    # Its pods are gone from the network (a timeout, as with a dead machine); the others answer.
    assert get(cluster, source, f"http://{victim_ip}:{ECHO_PORT}/", timeout_s=3).startswith("error:")
    other = echo[survivors[1].name]
    assert get(cluster, source, f"http://{other['status']['podIP']}:{ECHO_PORT}/").startswith(survivors[1].name)

    def not_ready() -> str:
        status = ready(kubectl_json(cluster, "get", "node", victim.name))
        return "" if status == "True" else status

    status = until(not_ready, NOT_READY_WITHIN_S, f"{victim.name} NotReady after kill-node")
    noticed = time.monotonic() - t0
    report(f"\n{victim.name} killed in {killed_in:.1f} s ({said}); Ready {status} {noticed:.1f} s after")
    assert status == "Unknown"  # nothing posts its status any more
    for node in survivors:
        assert ready(kubectl_json(cluster, "get", "node", node.name)) == "True", node.name


def test_a_killed_node_restarts_and_runs_its_pods_again(three_nodes: NodeCluster, echo: dict[str, dict[str, Any]]):
    """``node.sh restart-node``, as a machine that rebooted: the node is Ready again, and the echo
    pod still bound to it runs again (its kubelet finds its containers dead and starts them), on
    the pod network. The node is killed again after: the apps' modules run on nodes 1 and 3."""
    cluster = three_nodes
    victim = cluster.nodes[1]
    source = echo[cluster.nodes[0].name]["metadata"]["name"]
    pod_name = echo[victim.name]["metadata"]["name"]
    t0 = time.monotonic()
    said = cluster.restart_node(victim)
    back_in = time.monotonic() - t0
    assert ready(kubectl_json(cluster, "get", "node", victim.name)) == "True"
    assert sorted(daemons_of(cluster, victim).values()) == ["containerd", "kubelet"]

    def answers() -> str:
        pod = kubectl_json(cluster, "get", "pod", "-n", NAMESPACE, pod_name)
        ip = pod["status"].get("podIP")
        ready_now = any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
        answer = get(cluster, source, f"http://{ip}:{ECHO_PORT}/", timeout_s=3) if ip and ready_now else ""
        return answer if answer.startswith(victim.name) else ""

    answer = until(answers, 180, f"the echo pod on {victim.name} answering again")
    running_in = time.monotonic() - t0
    report(f"\n{victim.name} restarted ({said}); its echo pod answered {running_in:.1f} s after: {answer}")
    assert back_in < 120
    cluster.kill_node(victim)
    until(lambda: ready(kubectl_json(cluster, "get", "node", victim.name)) != "True", NOT_READY_WITHIN_S,
          f"{victim.name} NotReady after the second kill")
