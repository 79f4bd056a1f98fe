"""Pure builders: the names and labels of what a StreamApp becomes, and its supporting objects
as plain dicts (RBAC, Services, the disruption budget, the channel ConfigMaps). The pods are
`eddy_operator.pod_builders`'; the Spark configuration, and the list of everything in creation
order (`build_all`), `eddy_operator.spark_builders`'.

The handlers (`eddy_operator.reconcile`) apply what these return; nothing here talks to the
apiserver, so every object is unit-tested without a cluster (dask-kubernetes style; see
docs/DESIGN.md, "The operator's part").

What a StreamApp `<app>` becomes (all owned by the StreamApp):

- `<app>-driver` ServiceAccount, Role and RoleBinding: what Spark's driver needs to run its
  executors (pods, services, configmaps, statefulsets) and to write the runtime-state ConfigMap.
- `<app>-executor` ServiceAccount with no API token: executors never call the apiserver.
- `<app>-driver` headless Service and `<app>-driver` StatefulSet (one replica) running
  `eddy driver` as a Spark client against the Kubernetes master, so Spark creates the executor
  pods. A StatefulSet rather than a Deployment: at most one driver at a time (two drivers would
  both start executors and fence each other's transactions), and a stable pod name and DNS name,
  which Spark's `spark.kubernetes.driver.pod.name` and `spark.driver.host` need in client mode.
- `<app>-spark-conf` ConfigMap: `spark-defaults.conf` (read by spark-submit through
  `SPARK_CONF_DIR`), the executor pod template, and the StreamApp manifest itself
  (`streamapp.yaml`, read by the driver with `eddy_contract.spec.load_streamapp_file`).
- `<app>-executors` headless Service (metrics and interactive queries) and PodDisruptionBudget (no
  eviction: the operator empties a drained node's executors itself, eddy_operator.drains).
- `<app>-assignment` and `<app>-runtime-state` ConfigMaps: the channel (`eddy_contract.channel`).
- `<app>-versions` ConfigMap: the version the app wants, the last healthy one and the rejected
  ones (`eddy_operator.upgrades`).
- `<app>-push-token` Secret: the token the driver's requests to the task runners carry, the same
  for every driver of the app (made once, with a random token, by `eddy_operator.reconcile`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eddy_contract import channel
from eddy_contract.spec import API_VERSION, KIND, StreamAppSpec

DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
UI_PORT = 4040
CONF_DIR = "/opt/eddy/conf"
KAFKA_TLS_DIR = "/opt/eddy/kafka-tls"
STATE_VOLUME = "state"
EXECUTOR_CONTAINER = "executor"
DRIVER_CONTAINER = "driver"
# Spark's images run as 185; the image built from this repository's Dockerfile does too.
RUN_AS_USER = 185
SPARK_DEFAULTS_KEY = "spark-defaults.conf"
PUSH_TOKEN_KEY = "token"
POD_TEMPLATE_KEY = "executor-pod-template.yaml"
STREAMAPP_KEY = "streamapp.yaml"
CONFIG_HASH_ANNOTATION = "eddy.dev/config-hash"
# Spark's own labels on executor pods (and on the claims of its StatefulSet).
SPARK_APP_LABEL = "spark-app-selector"
SPARK_ROLE_LABEL = "spark-role"
SPARK_EXEC_ID_LABEL = "spark-exec-id"
APP_LABEL = "eddy.dev/app"
ROLE_LABEL = "eddy.dev/role"
ZONE_LABEL = "eddy.dev/zone"


@dataclass(frozen=True)
class Owner:
    """The StreamApp that owns what the builders make."""

    name: str
    uid: str


# ---------------------------------------------------------------------------------------
# Names and labels


def driver_name(app: str) -> str:
    return f"{app}-driver"


def driver_pod_name(app: str) -> str:
    return f"{driver_name(app)}-0"


def executor_service_account_name(app: str) -> str:
    return f"{app}-executor"


def executors_name(app: str) -> str:
    return f"{app}-executors"


def versions_configmap_name(app: str) -> str:
    return f"{app}-versions"


def push_token_secret_name(app: str) -> str:
    return f"{app}-push-token"


def conf_configmap_name(app: str) -> str:
    return f"{app}-spark-conf"


def spark_app_id(app: str) -> str:
    """Fixed, so that a restarted driver re-creates the same executor StatefulSet and claims."""
    return app


def executor_statefulset_name(app: str) -> str:
    """The StatefulSet Spark's statefulset allocator creates (default resource profile)."""
    return f"spark-s-{spark_app_id(app)}-0"


def executor_ordinal(app: str, pod: str) -> int | None:
    """The ordinal of an executor pod of the app's StatefulSet (`<statefulset>-<n>`), else None."""
    prefix = executor_statefulset_name(app) + "-"
    rest = pod[len(prefix):] if pod.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def state_claim_name(app: str, ordinal: int) -> str:
    return f"{STATE_VOLUME}-{executor_statefulset_name(app)}-{ordinal}"


def app_labels(app: str, component: str | None = None) -> dict[str, str]:
    labels = {
        "app.kubernetes.io/name": "eddy-streamapp",
        "app.kubernetes.io/instance": app,
        "app.kubernetes.io/managed-by": "eddy-operator",
        "app.kubernetes.io/part-of": "eddy",
        APP_LABEL: app,
    }
    if component is not None:
        labels["app.kubernetes.io/component"] = component
        labels[ROLE_LABEL] = component
    return labels


def driver_selector(app: str) -> dict[str, str]:
    return {APP_LABEL: app, ROLE_LABEL: "driver"}


def executor_selector(app: str) -> dict[str, str]:
    """Labels Spark puts on every executor pod of the app."""
    return {SPARK_APP_LABEL: spark_app_id(app), SPARK_ROLE_LABEL: "executor"}


def label_selector_string(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def owner_reference(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": owner.name,
        "uid": owner.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_metadata(spec: StreamAppSpec, owner: Owner, name: str, component: str | None) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": spec.namespace,
        "labels": app_labels(spec.name, component),
        "ownerReferences": [owner_reference(owner)],
    }


# ---------------------------------------------------------------------------------------
# RBAC


def build_driver_service_account(spec: StreamAppSpec, owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_metadata(spec, owner, driver_name(spec.name), "driver"),
    }


def build_executor_service_account(spec: StreamAppSpec, owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_metadata(spec, owner, executor_service_account_name(spec.name), "executor"),
        "automountServiceAccountToken": False,
    }


def build_driver_role(spec: StreamAppSpec, owner: Owner) -> dict[str, Any]:
    """What Spark's Kubernetes backend does in the namespace, and the runtime-state write."""
    rw = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": object_metadata(spec, owner, driver_name(spec.name), "driver"),
        "rules": [
            {"apiGroups": [""], "resources": ["pods", "services", "configmaps"], "verbs": rw},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": rw},
            {"apiGroups": ["apps"], "resources": ["statefulsets/scale"], "verbs": ["get", "update", "patch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        ],
    }


def build_driver_role_binding(spec: StreamAppSpec, owner: Owner) -> dict[str, Any]:
    name = driver_name(spec.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_metadata(spec, owner, name, "driver"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": spec.namespace}],
    }


# ---------------------------------------------------------------------------------------
# Services and disruption budget


def _headless_service(
    spec: StreamAppSpec, owner: Owner, name: str, component: str, selector: Mapping[str, str], ports: Mapping[str, int]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(spec, owner, name, component),
        "spec": {
            "clusterIP": "None",
            "selector": dict(selector),
            "ports": [{"name": port_name, "port": port, "targetPort": port} for port_name, port in ports.items()],
        },
    }


def build_driver_service(spec: StreamAppSpec, owner: Owner) -> dict[str, Any]:
    ports = {"driver-rpc": DRIVER_PORT, "blockmanager": BLOCK_MANAGER_PORT, "ui": UI_PORT, "metrics": spec.metrics_port}
    service = _headless_service(spec, owner, driver_name(spec.name), "driver", driver_selector(spec.name), ports)
    # Executors connect while the driver is still starting; readiness comes later.
    service["spec"]["publishNotReadyAddresses"] = True
    return service


def build_executor_service(spec: StreamAppSpec, owner: Owner) -> dict[str, Any]:
    ports = {"metrics": spec.metrics_port}
    return _headless_service(spec, owner, executors_name(spec.name), "executor", executor_selector(spec.name), ports)


def build_executor_pdb(spec: StreamAppSpec, owner: Owner, hand_over: bool = True) -> dict[str, Any]:
    """No eviction of an executor is allowed: a drain's evictions wait while the operator moves the
    pod's actives to caught-up copies, and the operator deletes the pod itself once it holds none
    (eddy_operator.drains). A delete is no eviction: rolling upgrades and node loss are not held.
    Without the hand-over (`hand_over` False), one executor at a time may be evicted."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_metadata(spec, owner, executors_name(spec.name), "executor"),
        "spec": {"maxUnavailable": 0 if hand_over else 1, "selector": {"matchLabels": executor_selector(spec.name)}},
    }


# ---------------------------------------------------------------------------------------
# Channel ConfigMaps


def build_channel_configmap(
    spec: StreamAppSpec, owner: Owner, name: str, channel_kind: str, data: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The assignment or runtime-state ConfigMap (`channel_kind`: assignment | runtime-state).
    The operator creates both, so both are owned and garbage-collected with the app."""
    meta = object_metadata(spec, owner, name, None)
    meta["labels"][channel.LABEL_CHANNEL] = channel_kind
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    if data:
        body["data"] = dict(data)
    return body


def build_push_token_secret(spec: StreamAppSpec, owner: Owner, token: str) -> dict[str, Any]:
    """The driver's push token (`eddy_runtime.driver.handoff.PUSH_TOKEN_ENV`), created once."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_metadata(spec, owner, push_token_secret_name(spec.name), "driver"),
        "type": "Opaque",
        "stringData": {PUSH_TOKEN_KEY: token},
    }


def build_versions_configmap(spec: StreamAppSpec, owner: Owner, data: Mapping[str, str]) -> dict[str, Any]:
    """The app's versions: wanted, healthy, rejected (eddy_operator.upgrades); the operator's only."""
    return build_channel_configmap(spec, owner, versions_configmap_name(spec.name), "versions", data)


def build_runtime_state_configmap(spec: StreamAppSpec, owner: Owner) -> dict[str, Any]:
    return build_channel_configmap(spec, owner, channel.runtime_state_configmap_name(spec.name), "runtime-state")


def build_assignment_configmap(spec: StreamAppSpec, owner: Owner, data: Mapping[str, str]) -> dict[str, Any]:
    return build_channel_configmap(spec, owner, channel.assignment_configmap_name(spec.name), "assignment", data)
