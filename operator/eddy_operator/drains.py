"""Drains that wait for warm copies (docs/operations.md, "Draining a node"). Pure functions of node
and pod manifests and the published assignment; the orchestrator carries them out.

`kubectl drain` (and the cluster autoscaler, Karpenter, a managed node pool's upgrade) first marks
a node: cordoned (`spec.unschedulable`) or tainted for removal. Then it evicts the node's pods
through the Eviction API, which honours PodDisruptionBudgets. An app's executors have a budget of
`maxUnavailable: 0` (eddy_operator.builders.build_executor_pdb): no eviction of one is ever
allowed, so the evicting tool retries (kubectl every 5 s) while the operator does the drain's work
its own way:

1. each executor on a marked node is *leaving* for the assignor (eddy_contract.assignor, rule 5):
   it takes no new copy, its standbys and stateless tasks go elsewhere at once, and each of its
   stateful actives stays until a copy elsewhere has caught up (a warmup is placed first where
   no standby is warm), then goes to that copy;
2. once the published assignment names no copy on it, and the driver runs that assignment (it
   has asked the pod's runner to let its actives go), the operator deletes the pod (a delete is
   not an eviction: the budget does not apply). Its `preStop` hook holds the stop until its runner
   holds no active (the driver has asked it to let them go, after committing what it processed);
3. the evicting tool's next attempt finds the pod gone, and the drain goes on.

The chart's `drains.handOver: false` (`EDDY_OPERATOR_DRAIN_HANDOVER=false`) turns all this off, as
before it existed: a budget of `maxUnavailable: 1` lets a drain evict one executor at a time, each
pod's actives move when it is deleted (its preStop hand-over to caught-up standbys where there are,
else a restore), and nothing waits for warm copies.

So a drain never takes an active from a pod before a warm copy has it, and never waits longer
than the copies take to catch up. An executor pod on a marked node that is not running (Pending,
Failed) goes at once; one running but not registered with the driver waits until it has (its
runner may be processing its last generation through a driver restart).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from eddy_contract.assignor import Assignment, Executor
from eddy_operator.pods import PodInfo

__all__ = ["HAND_OVER_ENV", "REMOVAL_TAINTS", "drained", "emptied", "hands_over", "is_draining", "leaving"]

#: the operator's switch (the chart's `drains.handOver`): "false" turns the hand-over off
HAND_OVER_ENV = "EDDY_OPERATOR_DRAIN_HANDOVER"


def hands_over() -> bool:
    """Whether this operator empties drained nodes itself (the default), from its environment."""
    return os.environ.get(HAND_OVER_ENV, "true").strip().lower() not in ("false", "0", "no", "off")

#: taints that mark a node for removal without cordoning it: the cluster autoscaler's scale-down,
#: Karpenter's disruption (v1 and before)
REMOVAL_TAINTS = frozenset({"ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted", "karpenter.sh/disruption"})


def is_draining(node: Mapping[str, Any]) -> bool:
    """A node (its manifest) is being emptied: cordoned, or tainted for removal."""
    spec = node.get("spec") or {}
    return bool(spec.get("unschedulable")) or any(t.get("key") in REMOVAL_TAINTS for t in spec.get("taints") or [])


def leaving(executors: Iterable[Executor], pods: Iterable[PodInfo], draining: Iterable[str]) -> list[str]:
    """The ids of the live executors whose pods are on a node being drained."""
    marked = set(draining)
    on = {p.name for p in pods if p.role == "executor" and p.node in marked}
    return [e.id for e in executors if e.pod in on]


def drained(pods: Iterable[PodInfo], draining: Iterable[str], assignment: Assignment, taken: bool) -> list[PodInfo]:
    """The executor pods on a node being drained that may go: registered executors to which the
    assignment (the one published) gives no copy, once the driver runs it (`taken`: without a
    driver to ask the runner to let go, its actives would wait for the next one), and pods that are
    not running."""
    marked = set(draining)
    return emptied([p for p in pods if p.role == "executor" and p.node in marked], assignment, taken)


def emptied(pods: Iterable[PodInfo], assignment: Assignment, taken: bool) -> list[PodInfo]:
    """Those of `pods` (leaving executors' pods: drained, or scaled in) that may go now: registered
    executors to which the assignment gives no copy, once the driver runs it (`taken`), and pods
    that are not running; none going already."""
    holding = set(assignment.executors())

    def may_go(p: PodInfo) -> bool:
        if p.exec_id is not None and p.exec_id.isdigit() and p.phase == "Running":
            return taken and p.exec_id not in holding
        return p.phase != "Running"

    return sorted((p for p in pods if not p.deleting and may_go(p)), key=lambda p: p.name)
