"""On Kubernetes the executor pods outlive a driver restart (docs/operations.md, "Upgrading an
app"): their task runners go on processing while no driver runs, and the next driver adopts them.

Spark's StatefulSet allocator creates the executors' StatefulSet `spark-s-<appId>-0` when the
SparkContext starts, owned by the driver pod (so the garbage collector would delete it, and its
pods, with the driver pod), and fails if it exists. So the driver, in its pod (the operator sets
`EDDY_EXECUTOR_STATEFULSET`, `EDDY_NAMESPACE`, `EDDY_APP` and `EDDY_APP_UID`):

1. before its SparkContext starts, deletes an earlier driver's StatefulSet with
   ``propagationPolicy: Orphan`` (its pods stay, running), and waits until it is gone;
2. Spark creates the StatefulSet anew: same name, selector, claim templates and pod template (the
   operator's Spark settings keep it the same revision, see `eddy_operator.spark_builders`), so
   the StatefulSet controller adopts the running pods instead of replacing them;
3. once the SparkContext is up, makes the StreamApp the StatefulSet's owner instead of the driver
   pod, so that the next restart does not take the executors with it, and deleting the app still does.

A stopping driver deletes neither (``spark.kubernetes.executor.deleteOnTermination=false``).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from eddy_contract.spec import API_VERSION, KIND

__all__ = ["adopt_executor_set", "release_executor_set"]

log = logging.getLogger("eddy.driver")

#: how long a driver waits for an earlier driver's StatefulSet to be gone
RELEASE_TIMEOUT_S = 60.0


def _target() -> tuple[str, str, str, str] | None:
    """(StatefulSet, namespace, app, app uid) from the driver pod's environment, None elsewhere."""
    names = [os.environ.get(k, "") for k in ("EDDY_EXECUTOR_STATEFULSET", "EDDY_NAMESPACE", "EDDY_APP", "EDDY_APP_UID")]
    return (names[0], names[1], names[2], names[3]) if all(names) else None


def _apps_api() -> Any:
    from kubernetes import client

    from eddy_contract.kube import api_client

    return client.AppsV1Api(api_client())


def release_executor_set() -> None:
    """Before the SparkContext starts: an earlier driver's executor StatefulSet deleted, its pods
    orphaned (they keep running), so that Spark can create it again and adopt them."""
    target = _target()
    if target is None:
        return
    name, namespace, _, _ = target
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api = _apps_api()
    try:
        api.delete_namespaced_stateful_set(name, namespace, body=client.V1DeleteOptions(propagation_policy="Orphan"))
    except ApiException as e:
        if e.status == 404:
            return
        raise
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            api.read_namespaced_stateful_set(name, namespace)
        except ApiException as e:
            if e.status == 404:
                log.info("executor StatefulSet %s released: its pods keep running, for this driver to adopt", name)
                return
            raise
        time.sleep(0.2)
    raise TimeoutError(f"the executor StatefulSet {namespace}/{name} was not gone {RELEASE_TIMEOUT_S:.0f}s after "
                       "its delete")


def adopt_executor_set() -> None:
    """Once the SparkContext is up: the executors' StatefulSet owned by the StreamApp, not by
    this driver's pod."""
    target = _target()
    if target is None:
        return
    name, namespace, app, uid = target
    owner = {"apiVersion": API_VERSION, "kind": KIND, "name": app, "uid": uid, "controller": False,
             "blockOwnerDeletion": False}
    _apps_api().patch_namespaced_stateful_set(
        name, namespace, [{"op": "replace", "path": "/metadata/ownerReferences", "value": [owner]}])
    log.info("executor StatefulSet %s now owned by StreamApp %s: the executors outlive this driver", name, app)
