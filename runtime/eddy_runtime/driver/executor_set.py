"""On Kubernetes the executor pods outlive a driver restart (docs/operations.md, "Upgrading an
app"): their task runners go on processing while no driver runs, and the next driver adopts them.

Spark's StatefulSet allocator creates the executors' StatefulSet `spark-s-<appId>-0` when the
SparkContext starts, owned by the driver pod (so the garbage collector would delete it, and its
pods, with the driver pod), and fails if it exists; and its pod template names the driver pod
(an owner reference), so each driver's is a new revision, which the StatefulSet controller would
roll out by replacing every pod. So the driver, in its pod (the operator sets
`EDDY_EXECUTOR_STATEFULSET`, `EDDY_NAMESPACE`, `EDDY_APP` and `EDDY_APP_UID`):

1. before its SparkContext starts (`release_executor_set`), takes the running executor pods out
   of the earlier driver's StatefulSet (their resource-profile label moved aside, so that no
   StatefulSet selects them; they keep running), deletes that StatefulSet, and keeps its pod
   template; their executor-id label says `EXECID` again, as Spark labels a pod until its
   executor registered: each gets its id from this driver when its new JVM registers, and until
   then the operator knows it for a pod re-registering, not for its earlier executor (whose id
   this driver may hand to another pod first: operator/executor_ids.py's `reregistering`); pods
   an earlier driver released and died before adopting are taken too (their template unknown,
   they are marked outdated, and replaced one at a time);
2. Spark creates the StatefulSet anew: same name, selector and claim templates; it cannot create
   pods under the names the running ones hold;
3. once the SparkContext is up (`adopt_executor_set`), gives the running pods their label back
   and, if the new pod template is the old one but for the driver it names, the new revision's
   label too: the StatefulSet adopts them as they are, and replaces none. A template that changed
   (an image, resources, Spark settings) keeps the old revision's label, and the pod is marked
   outdated (`eddy.dev/outdated`, the new revision as its value): a rolling upgrade. The
   StatefulSet's update strategy is `OnDelete` (set before any pod is given back), so the
   controller replaces none by itself: the operator does, one at a time, each once its actives
   are on warm copies elsewhere and the one before is ready (warm: executor/runner.py's
   READY_PATH; operator/eddy_operator/rollout.py);
4. makes the StreamApp the StatefulSet's owner instead of the driver pod, so that the next
   restart does not take the executors with it, and deleting the app still does.

A stopping driver deletes neither (``spark.kubernetes.executor.deleteOnTermination=false``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eddy_contract.spec import API_VERSION, KIND
from eddy_contract.upgrade import OUTDATED_ANNOTATION
from eddy_runtime.protocol.placement import GENERATED_ID

__all__ = ["ReleasedExecutors", "adopt_executor_set", "release_executor_set", "same_template"]

log = logging.getLogger("eddy.driver")

#: how long a driver waits for an earlier driver's StatefulSet to be gone, and for its own's revision
RELEASE_TIMEOUT_S = 60.0
#: Spark's label that the StatefulSet selects its pods by, besides the app's and the role's
PROFILE_LABEL = "spark-exec-resourceprofile-id"
#: Spark's label of an executor pod's executor id (`GENERATED_ID` until its executor registered)
EXEC_ID_LABEL = "spark-exec-id"
#: the StatefulSet controller's label of a pod's revision
REVISION_LABEL = "controller-revision-hash"
#: the profile label's value while a pod belongs to no StatefulSet
RELEASED = "released"
#: a released pod's profile label, kept for the driver that adopts it
PROFILE_ANNOTATION = "eddy.dev/released-profile"


@dataclass
class ReleasedExecutors:
    """The executor pods `release_executor_set` took out of an earlier driver's StatefulSet."""

    #: that StatefulSet's pod template
    template: Mapping[str, Any] | None = None
    #: pod name -> its resource-profile label's value
    pods: dict[str, str] = field(default_factory=dict)
    #: the pods that ran that StatefulSet's template (its update revision): the others were not
    #: replaced yet by a rolling upgrade under way, and keep their revision, to be replaced still
    current: set[str] = field(default_factory=set)


def same_template(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """Whether two executor pod templates are the same but for what names their driver (the
    owner reference Spark adds): the running pods are then the new revision's too."""
    def normal(template: Mapping[str, Any] | None) -> Any:
        if template is None:
            return None
        meta = {k: v for k, v in (template.get("metadata") or {}).items() if k != "ownerReferences"}
        return {**template, "metadata": meta}

    return old is not None and normal(old) == normal(new)


def _target() -> tuple[str, str, str, str] | None:
    """(StatefulSet, namespace, app, app uid) from the driver pod's environment, None elsewhere."""
    names = [os.environ.get(k, "") for k in ("EDDY_EXECUTOR_STATEFULSET", "EDDY_NAMESPACE", "EDDY_APP", "EDDY_APP_UID")]
    return (names[0], names[1], names[2], names[3]) if all(names) else None


def _api_client() -> Any:
    from eddy_contract.kube import api_client

    return api_client()


def release_executor_set() -> ReleasedExecutors:
    """Before the SparkContext starts: the running executor pods taken out of an earlier driver's
    StatefulSet, which is deleted (see the module's docstring)."""
    released = ReleasedExecutors()
    target = _target()
    if target is None:
        return released
    name, namespace, _, _ = target
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api_client = _api_client()
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    # A driver that died between its release and its adoption left its pods released: adopted now
    # (their template is unknown, so they are marked outdated and replaced one at a time).
    for pod in core.list_namespaced_pod(namespace, label_selector=f"{PROFILE_LABEL}={RELEASED}").items:
        if pod.metadata.name.startswith(f"{name}-") and pod.metadata.deletion_timestamp is None:
            released.pods[pod.metadata.name] = (pod.metadata.annotations or {}).get(PROFILE_ANNOTATION, "0")
    try:
        old = apps.read_namespaced_stateful_set(name, namespace)
    except ApiException as e:
        if e.status == 404:
            if released.pods:
                log.info("executor pods %s were released by an earlier driver that did not adopt them: this "
                         "driver does", sorted(released.pods))
            return released
        raise
    released.template = api_client.sanitize_for_serialization(old.spec.template)
    update_revision = old.status.update_revision if old.status else None
    selector = ",".join(f"{k}={v}" for k, v in sorted(old.spec.selector.match_labels.items()))
    for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
        if pod.metadata.deletion_timestamp is not None:
            continue
        profile = pod.metadata.labels[PROFILE_LABEL]
        released.pods[pod.metadata.name] = profile
        if update_revision and pod.metadata.labels.get(REVISION_LABEL) == update_revision:
            released.current.add(pod.metadata.name)
        core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {
            "labels": {PROFILE_LABEL: RELEASED, EXEC_ID_LABEL: GENERATED_ID},
            "annotations": {PROFILE_ANNOTATION: profile}}})
    apps.delete_namespaced_stateful_set(name, namespace, body=client.V1DeleteOptions(propagation_policy="Orphan"))
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            apps.read_namespaced_stateful_set(name, namespace)
        except ApiException as e:
            if e.status == 404:
                log.info("executor StatefulSet %s released; its pods %s keep running, for this driver to adopt", name,
                         sorted(released.pods))
                return released
            raise
        time.sleep(0.2)
    raise TimeoutError(f"the executor StatefulSet {namespace}/{name} was not gone {RELEASE_TIMEOUT_S:.0f}s after "
                       "its delete")


def adopt_executor_set(released: ReleasedExecutors) -> None:
    """Once the SparkContext is up: the released pods given back to the executors' StatefulSet
    (as its new revision when the pod template is the same), which the StreamApp owns from now on."""
    target = _target()
    if target is None:
        return
    name, namespace, app, uid = target
    from kubernetes import client

    api_client = _api_client()
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    owner = {"apiVersion": API_VERSION, "kind": KIND, "name": app, "uid": uid, "controller": False,
             "blockOwnerDeletion": False}
    # OnDelete before any pod is given back: the operator replaces outdated pods itself, each once
    # its actives are on warm copies elsewhere (eddy_operator.rollout), not the controller
    apps.patch_namespaced_stateful_set(
        name, namespace, [{"op": "replace", "path": "/metadata/ownerReferences", "value": [owner]},
                          {"op": "replace", "path": "/spec/updateStrategy", "value": {"type": "OnDelete"}}])
    log.info("executor StatefulSet %s now owned by StreamApp %s: the executors outlive this driver", name, app)
    if not released.pods:
        return
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    current = apps.read_namespaced_stateful_set(name, namespace)
    while not (current.status and current.status.update_revision) and time.monotonic() < deadline:
        time.sleep(0.2)
        current = apps.read_namespaced_stateful_set(name, namespace)
    same = same_template(released.template, api_client.sanitize_for_serialization(current.spec.template))
    revision = current.status.update_revision if current.status else None
    for pod, profile in sorted(released.pods.items()):
        adopted = bool(same and revision and pod in released.current)
        labels = {PROFILE_LABEL: profile, **({REVISION_LABEL: revision} if adopted else {})}
        outdated = None if adopted else (revision or "unknown")
        try:
            core.patch_namespaced_pod(pod, namespace, {"metadata": {
                "labels": labels, "annotations": {OUTDATED_ANNOTATION: outdated}}})
        except client.exceptions.ApiException as e:
            if e.status != 404:
                raise
    behind = sorted(p for p in released.pods if not (same and p in released.current))
    log.info("executor pods %s adopted by StatefulSet %s %s", sorted(released.pods), name,
             f"as its revision {revision}: none is replaced" if not behind else
             f"; {behind} at their old revision: the pod template changed (or a rolling upgrade was under way), "
             "and the operator replaces them one at a time, each once its actives are on warm copies elsewhere")
