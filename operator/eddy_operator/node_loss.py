"""An app's pods on a lost node, and what keeps them from coming back (docs/operations.md, "Node
loss"). The decisions are pure functions of node, pod and volume manifests; `release` carries
one out through the apiserver.

A node whose kubelet stops renewing its Lease goes NotReady (its Ready condition Unknown or False).
Its pods keep their API objects: nothing on the node can confirm that they stopped, so Kubernetes
neither removes them (a StatefulSet never makes a second pod of one identity while the first's
object exists; a graceful delete waits for the kubelet) nor moves a claim bound to a volume that
lives only on that node. The executors on it count as lost as soon as the node is down (their
pods' status is the last their kubelet sent: eddy_operator.pods.live_executors), and their actives
fail over then; what is left is the pod and its claim.

A node can also go without ever being down: drained and removed (the cluster autoscaler's
scale-down), or drained and left cordoned. An executor pod made again after its drain then waits,
Pending, for the only node its volume lives on. Once it has waited `nodeLossTimeout` and that node
is gone, down or being drained, its claim is released the same way (`unplaceable`,
`release_unplaceable`), and the pod starts on a live node with a fresh volume.

Once a node has been down for `spec.state.nodeLossTimeout`, the operator deletes the app's pods on
it at once (grace 0: the node cannot take part; its containers are gone or fenced by the tasks'
newer generation) and deletes the claim of each pod whose volume is pinned to that node, so that
the StatefulSet makes the executor again on a live node with a fresh volume, which the assignor
fills as a warmup from the changelog before it gets actives back. A network volume (pinned to a
zone, or to nothing) keeps its claim: it follows the pod to another node.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from eddy_operator.kube import Kube
from eddy_operator.pods import PodInfo, instant

__all__ = ["HOSTNAME_LABEL", "Released", "Stranded", "Unplaceable", "down_since", "pinned_node", "release",
           "release_unplaceable", "stranded", "unplaceable"]

#: the well-known node label a node-local volume's node affinity names
HOSTNAME_LABEL = "kubernetes.io/hostname"


def down_since(node: Mapping[str, Any]) -> str | None:
    """When a node (its manifest) went down: its Ready condition's last transition, when that
    condition is not True (a node without one has not come up yet: not down). None if it is up."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return None if c.get("status") == "True" else str(c.get("lastTransitionTime") or "")
    return None


@dataclass(frozen=True)
class Stranded:
    """A pod of the app on a node down for longer than the timeout."""

    pod: PodInfo
    node: str
    #: when the node went down (ISO 8601)
    since: str
    #: seconds the node has been down
    down_s: float


def stranded(pods: Iterable[PodInfo], down: Mapping[str, str], now: datetime, timeout_s: float) -> list[Stranded]:
    """The pods on a node down (`down`: node -> since, ISO 8601) for `timeout_s` or more."""
    found = []
    for pod in pods:
        since = down.get(pod.node or "")
        if not since:
            continue
        down_s = (now - instant(since)).total_seconds()
        if down_s >= timeout_s:
            found.append(Stranded(pod, pod.node or "", since, down_s))
    return sorted(found, key=lambda s: s.pod.name)


def pinned_node(volume: Mapping[str, Any]) -> str | None:
    """The one node a PersistentVolume (its manifest) can be used on, from its required node
    affinity (a `local` or `hostPath` volume's `kubernetes.io/hostname In [node]`); None for a
    volume that is not pinned to one node (a network volume, pinned to a zone or to nothing)."""
    required = (((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {})
    nodes: set[str] = set()
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == HOSTNAME_LABEL and expr.get("operator") == "In":
                nodes.update(expr.get("values") or [])
    return next(iter(nodes)) if len(nodes) == 1 else None


@dataclass(frozen=True)
class Released:
    """What `release` did for a stranded pod."""

    stranded: Stranded
    #: claims deleted: their volumes live only on the lost node
    claims: tuple[str, ...]
    #: claims kept: their volumes follow the pod to another node
    kept: tuple[str, ...]

    def describe(self) -> str:
        s = self.stranded
        what = [f"pod {s.pod.name} deleted (node {s.node} down for {s.down_s:.0f} s, since {s.since})"]
        if self.claims:
            what.append(f"claim {', '.join(self.claims)} released (its volume lives only on {s.node}): the executor "
                        "is made again on a live node with a fresh volume, restored from the changelog")
        if self.kept:
            what.append(f"claim {', '.join(self.kept)} kept (its volume can follow the pod to another node)")
        return "; ".join(what)


def release(kube: Kube, namespace: str, s: Stranded, hostnames: Mapping[str, str]) -> Released | None:
    """Delete the claims of `s`'s pod whose volumes are pinned to its lost node (`hostnames`: node
    -> its `kubernetes.io/hostname` label), then the pod itself at once (grace 0). The claim first:
    it stays (protected) while the pod exists, and goes once the pod has; the StatefulSet then makes
    the pod and a new claim again. None if the pod was gone already (or made again since)."""
    if _still_there(kube, namespace, s.pod) is None:
        return None
    lost = hostnames.get(s.node, s.node)
    released, kept = _release_claims(kube, namespace, s.pod, lambda pinned: pinned == lost)
    _delete_now(kube, namespace, s.pod)
    return Released(s, tuple(released), tuple(kept))


@dataclass(frozen=True)
class Unplaceable:
    """An executor pod the scheduler has found no node for since `since`, for `pending_s`."""

    pod: PodInfo
    since: str
    pending_s: float


def unplaceable(pods: Iterable[PodInfo], now: datetime, timeout_s: float) -> list[Unplaceable]:
    """The executor pods unschedulable for `timeout_s` or more (whatever the reason: whether their
    volume's node is the cause is for `release_unplaceable` to find out)."""
    found = []
    for pod in pods:
        if pod.role != "executor" or pod.node is not None or pod.deleting or not pod.unschedulable_since:
            continue
        pending_s = (now - instant(pod.unschedulable_since)).total_seconds()
        if pending_s >= timeout_s:
            found.append(Unplaceable(pod, pod.unschedulable_since, pending_s))
    return sorted(found, key=lambda u: u.pod.name)


def release_unplaceable(kube: Kube, namespace: str, u: Unplaceable, usable: Collection[str]) -> str | None:
    """Release the claims of `u`'s pod whose volumes are pinned to a node not in `usable` (the
    `kubernetes.io/hostname` of every node that is up and not being drained), then delete the pod
    so that the StatefulSet makes it again with new claims. What was done, or None if nothing
    (no claim pinned to such a node: the pod waits for something else; or the pod is gone)."""
    current = _still_there(kube, namespace, u.pod)
    if current is None or current.spec.node_name:
        return None
    pinned_to: dict[str, str] = {}
    released, _ = _release_claims(kube, namespace, u.pod, lambda pinned: pinned not in usable, pinned_to)
    if not released:
        return None
    _delete_now(kube, namespace, u.pod)
    nodes = ", ".join(sorted(set(pinned_to.values())))
    return (f"pod {u.pod.name} unschedulable for {u.pending_s:.0f} s (since {u.since}): claim "
            f"{', '.join(released)} released (its volume lives only on {nodes}, which is gone, down or being "
            "drained); the executor is made again on a live node with a fresh volume, restored from the changelog")


def _still_there(kube: Kube, namespace: str, pod: PodInfo) -> Any | None:
    """The pod as the apiserver has it now, if it is still the one read (not gone, not made again
    under its name since)."""
    try:
        current = kube.core.read_namespaced_pod(pod.name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return current if current.metadata.uid == pod.uid else None


def _release_claims(kube: Kube, namespace: str, pod: PodInfo, release_if: Callable[[str], bool],
                    pinned_to: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """Delete each claim of `pod` whose volume is pinned to a node (its hostname) `release_if`
    says; the others are kept. The claims released and kept; `pinned_to` gets each released
    claim's node."""
    released, kept = [], []
    for claim in pod.claims:
        try:
            pvc = kube.core.read_namespaced_persistent_volume_claim(claim, namespace)
        except ApiException as err:
            if err.status == 404:
                continue
            raise
        pinned = None
        if pvc.spec.volume_name:
            pinned = pinned_node(kube.core.api_client.sanitize_for_serialization(
                kube.core.read_persistent_volume(pvc.spec.volume_name)))
        if pinned is not None and release_if(pinned):
            if pvc.metadata.deletion_timestamp is None:
                kube.core.delete_namespaced_persistent_volume_claim(claim, namespace)
            released.append(claim)
            if pinned_to is not None:
                pinned_to[claim] = pinned
        else:
            kept.append(claim)
    return released, kept


def _delete_now(kube: Kube, namespace: str, pod: PodInfo) -> None:
    """Delete the pod read (not one made again under its name since) at once (grace 0)."""
    kube.delete_pod(namespace, pod.name, pod.uid, grace_period_s=0)
