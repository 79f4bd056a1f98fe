"""The node-loss decisions (eddy_operator.node_loss): which nodes are down since when, which pods
are stranded on them past the timeout, which wait unschedulable past it, and which volumes live on
one node only."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from eddy_operator.node_loss import down_since, pinned_node, stranded, unplaceable
from eddy_operator.pods import pod_info

pytestmark = pytest.mark.unit


def _node(ready: str | None, since: str = "2026-11-27T10:00:00Z") -> dict[str, Any]:
    conditions = [{"type": "MemoryPressure", "status": "False", "lastTransitionTime": "2026-11-27T09:00:00Z"}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready, "lastTransitionTime": since})
    return {"metadata": {"name": "n"}, "status": {"conditions": conditions}}


def _pod(name: str, node: str | None, claim: str | None = None) -> dict[str, Any]:
    volumes = [{"name": "state", "persistentVolumeClaim": {"claimName": claim}}] if claim else []
    volumes.append({"name": "conf", "configMap": {"name": "c"}})
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": {"spark-role": "executor"}},
            "spec": {"nodeName": node, "volumes": volumes}, "status": {"phase": "Running"}}


def _volume(affinity: list[dict[str, Any]] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"capacity": {"storage": "1Gi"}}
    if affinity is not None:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": affinity}]}}
    return {"metadata": {"name": "pv"}, "spec": spec}


def test_a_node_is_down_from_its_ready_condition_turning_unknown_or_false():
    assert down_since(_node("True")) is None
    assert down_since(_node("Unknown", "2026-11-27T10:01:02Z")) == "2026-11-27T10:01:02Z"
    assert down_since(_node("False", "2026-11-27T10:03:00Z")) == "2026-11-27T10:03:00Z"
    assert down_since(_node(None)) is None  # not come up yet: not lost


def test_pods_are_stranded_only_on_a_node_down_for_the_timeout_or_more():
    pods = [pod_info(_pod("exec-2", "node-b", "state-exec-2")), pod_info(_pod("exec-1", "node-a", "state-exec-1")),
            pod_info(_pod("exec-3", "node-c")), pod_info(_pod("pending", None))]
    down = {"node-a": "2026-11-27T10:00:00Z", "node-c": "2026-11-27T10:00:50Z"}
    now = datetime(2026, 11, 27, 10, 1, 0, tzinfo=UTC)
    found = stranded(pods, down, now, timeout_s=60)
    assert [(s.pod.name, s.node, s.down_s) for s in found] == [("exec-1", "node-a", 60.0)]
    assert found[0].pod.claims == ("state-exec-1",) and found[0].pod.uid == "uid-exec-1"
    # node-c has been down for 10 s: not yet; both at a shorter timeout, in name order
    assert [s.pod.name for s in stranded(pods, down, now, timeout_s=10)] == ["exec-1", "exec-3"]


def test_a_local_volume_is_pinned_to_its_node_and_a_network_volume_to_none():
    local = _volume([{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}])
    assert pinned_node(local) == "node-a"
    zonal = _volume([{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}])
    assert pinned_node(zonal) is None
    assert pinned_node(_volume(None)) is None
    # a volume reachable from two nodes follows its pod to either: not pinned to one
    shared = _volume([{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a", "node-b"]}])
    assert pinned_node(shared) is None


def _unschedulable(name: str, since: str, role: str = "executor") -> dict[str, Any]:
    pod = _pod(name, None, f"state-{name}")
    pod["metadata"]["labels"] = {"spark-role": role}
    pod["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": since}]}
    return pod


def test_executor_pods_unschedulable_for_the_timeout_or_more_are_candidates_for_a_release():
    now = datetime(2026, 11, 27, 10, 1, 0, tzinfo=UTC)
    scheduled_pending = _pod("exec-5", None, "state-exec-5")
    scheduled_pending["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-27T09:00:00Z"}]}
    pods = [pod_info(p) for p in (
        _unschedulable("exec-2", "2026-11-27T10:00:00Z"),
        _unschedulable("exec-1", "2026-11-27T10:00:30Z"),
        _unschedulable("driver-0", "2026-11-27T09:00:00Z", role="driver"),
        scheduled_pending,
        _pod("exec-3", "node-a", "state-exec-3"))]
    assert pods[0].unschedulable_since == "2026-11-27T10:00:00Z" and pods[3].unschedulable_since is None
    assert [(u.pod.name, u.pending_s) for u in unplaceable(pods, now, timeout_s=60)] == [("exec-2", 60.0)]
    assert [u.pod.name for u in unplaceable(pods, now, timeout_s=30)] == ["exec-1", "exec-2"]
