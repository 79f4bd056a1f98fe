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

Once a node has been down for `spec.state.nodeLossTimeout`, the operator deletes the app's pods on
it at once (grace 0: the node cannot take part; its containers are gone or fenced by the tasks'
newer generation) and deletes the claim of each pod whose volume is pinned to that node, so that
the StatefulSet makes the executor again on a live node with a fresh volume, which the assignor
fills as a warmup from the changelog before it gets actives back. A network volume (pinned to a
zone, or to nothing) keeps its claim: it follows the pod to another node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from eddy_operator.kube import Kube
from eddy_operator.pods import PodInfo, instant

__all__ = ["HOSTNAME_LABEL", "Released", "Stranded", "down_since", "pinned_node", "release", "stranded"]

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
    try:
        current = kube.core.read_namespaced_pod(s.pod.name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    if current.metadata.uid != s.pod.uid:
        return None
    released, kept = [], []
    for claim in s.pod.claims:
        try:
            pvc = kube.core.read_namespaced_persistent_volume_claim(claim, namespace)
        except ApiException as err:
            if err.status == 404:
                continue
            raise
        volume = None
        if pvc.spec.volume_name:
            volume = kube.core.api_client.sanitize_for_serialization(
                kube.core.read_persistent_volume(pvc.spec.volume_name))
        if volume is not None and pinned_node(volume) == hostnames.get(s.node, s.node):
            if pvc.metadata.deletion_timestamp is None:
                kube.core.delete_namespaced_persistent_volume_claim(claim, namespace)
            released.append(claim)
        else:
            kept.append(claim)
    try:
        # the pod read, not one made again under its name since
        kube.core.delete_namespaced_pod(s.pod.name, namespace, body=client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=s.pod.uid)))
    except ApiException as err:
        if err.status not in (404, 409):  # gone already; another pod under its name
            raise
    return Released(s, tuple(released), tuple(kept))
