"""Pure builders: the Kubernetes objects a StreamApp becomes, as plain dicts.

The handlers (`eddy_operator.reconcile`) apply what these return; nothing here talks to the
apiserver, so every object is unit-tested without a cluster (dask-kubernetes style).

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
- `<app>-executors` headless Service (metrics) and PodDisruptionBudget (one executor at a time).
- `<app>-assignment` and `<app>-runtime-state` ConfigMaps: the channel (`eddy_contract.channel`).

State volumes that outlive executor pods and driver restarts. Three ways were weighed:

1. Spark's on-demand claims (`claimName=OnDemand`) with `ownPersistentVolumeClaim` and
   `reusePersistentVolumeClaim`: a replacement executor gets *some* free claim, but the claims are
   owned by the driver pod (a driver restart garbage-collects every store), Spark deletes claims
   labelled with the app id when it stops, and a new driver only reuses claims of its own app id.
2. Volumes the operator owns (`<app>-state-<n>`): nothing in Spark mounts claim *n* into the
   right executor; executor ids only grow (`SPARK_EXECUTOR_ID` in a claim name names a claim that
   never existed before), so the operator would need a mutating webhook to hand claims out.
3. Spark's StatefulSet allocator (`spark.kubernetes.allocation.pods.allocator=statefulset`), the
   choice: Spark creates StatefulSet `spark-s-<appId>-0` whose volumeClaimTemplates come from the
   on-demand claim settings, so the StatefulSet controller gives executor ordinal *k* claim
   `state-spark-s-<appId>-0-<k>` every time: a deleted, evicted or failed executor comes back on
   the same volume and finds its stores and checkpoints. With a fixed `spark.app.id` (the app's
   name), a restarted driver re-creates the same StatefulSet and re-attaches the same claims.
   The claims belong to no pod; with `ownPersistentVolumeClaim=false` Spark never deletes them;
   the operator deletes them with the app only when `state.retainVolumesOnDelete` is false.
   Executor ids are still new on every start (the driver hands them out and labels the pod
   `spark-exec-id`), which is why the assignor is fed by what each volume holds, not by ids.

Contract with the runtime's driver (environment of the driver container): `EDDY_STREAMAPP`
(the manifest path), `SPARK_CONF_DIR`, `EDDY_APP`, `EDDY_NAMESPACE`, `EDDY_ASSIGNMENT_CONFIGMAP`,
`EDDY_RUNTIME_STATE_CONFIGMAP`, `EDDY_METRICS_PORT`, `EDDY_POD_NAME`; both driver and executors get
`EDDY_STATE_DIR` and Kafka credentials as `EDDY_KAFKA_SASL_USERNAME` / `EDDY_KAFKA_SASL_PASSWORD`
(from the Secrets) and TLS files under `/opt/eddy/kafka-tls/` (`EDDY_KAFKA_SSL_*_LOCATION`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from eddy_contract import channel
from eddy_contract.spec import API_VERSION, KIND, SecretKeyRef, StreamAppSpec

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


def conf_configmap_name(app: str) -> str:
    return f"{app}-spark-conf"


def spark_app_id(app: str) -> str:
    """Fixed, so that a restarted driver re-creates the same executor StatefulSet and claims."""
    return app


def executor_statefulset_name(app: str) -> str:
    """The StatefulSet Spark's statefulset allocator creates (default resource profile)."""
    return f"spark-s-{spark_app_id(app)}-0"


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


def _metadata(spec: StreamAppSpec, owner: Owner, name: str, component: str | None) -> dict[str, Any]:
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
        "metadata": _metadata(spec, owner, driver_name(spec.name), "driver"),
    }


def build_executor_service_account(spec: StreamAppSpec, owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(spec, owner, executor_service_account_name(spec.name), "executor"),
        "automountServiceAccountToken": False,
    }


def build_driver_role(spec: StreamAppSpec, owner: Owner) -> dict[str, Any]:
    """What Spark's Kubernetes backend does in the namespace, and the runtime-state write."""
    rw = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _metadata(spec, owner, driver_name(spec.name), "driver"),
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
        "metadata": _metadata(spec, owner, name, "driver"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": spec.namespace}],
    }


# ---------------------------------------------------------------------------------------
# Services and disruption budget


def build_driver_service(spec: StreamAppSpec, owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, owner, driver_name(spec.name), "driver"),
        "spec": {
            "clusterIP": "None",
            # Executors connect while the driver is still starting; readiness comes later.
            "publishNotReadyAddresses": True,
            "selector": driver_selector(spec.name),
            "ports": [
                {"name": "driver-rpc", "port": DRIVER_PORT, "targetPort": DRIVER_PORT},
                {"name": "blockmanager", "port": BLOCK_MANAGER_PORT, "targetPort": BLOCK_MANAGER_PORT},
                {"name": "ui", "port": UI_PORT, "targetPort": UI_PORT},
                {"name": "metrics", "port": spec.metrics_port, "targetPort": spec.metrics_port},
            ],
        },
    }


def build_executor_service(spec: StreamAppSpec, owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, owner, executors_name(spec.name), "executor"),
        "spec": {
            "clusterIP": "None",
            "selector": executor_selector(spec.name),
            "ports": [{"name": "metrics", "port": spec.metrics_port, "targetPort": spec.metrics_port}],
        },
    }


def build_executor_pdb(spec: StreamAppSpec, owner: Owner) -> dict[str, Any]:
    # One executor at a time: its tasks fail over to standbys on the others while it is away.
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(spec, owner, executors_name(spec.name), "executor"),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": executor_selector(spec.name)}},
    }


# ---------------------------------------------------------------------------------------
# Spark configuration


def build_spark_conf(spec: StreamAppSpec, storage_class: str) -> dict[str, str]:
    """The driver's spark-defaults: client mode against the in-cluster master, executors from
    the StatefulSet allocator with a state claim each; the user's sparkConf last."""
    app = spec.name
    prefix = f"spark.kubernetes.executor.volumes.persistentVolumeClaim.{STATE_VOLUME}"
    driver_host = f"{driver_pod_name(app)}.{driver_name(app)}.{spec.namespace}.svc"
    conf = {
        "spark.master": "k8s://https://kubernetes.default.svc:443",
        "spark.submit.deployMode": "client",
        "spark.app.name": app,
        "spark.app.id": spark_app_id(app),
        "spark.kubernetes.namespace": spec.namespace,
        "spark.kubernetes.container.image": spec.image,
        "spark.kubernetes.container.image.pullPolicy": spec.image_pull_policy,
        "spark.kubernetes.driver.pod.name": driver_pod_name(app),
        "spark.kubernetes.authenticate.executor.serviceAccountName": executor_service_account_name(app),
        "spark.kubernetes.authenticate.caCertFile": "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        "spark.kubernetes.authenticate.oauthTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "spark.driver.host": driver_host,
        "spark.driver.bindAddress": "0.0.0.0",
        # Executors dial the driver's stable DNS name, never the bind address (Spark 4 would hand
        # them 0.0.0.0 when this is on).
        "spark.kubernetes.executor.useDriverPodIP": "false",
        "spark.driver.port": str(DRIVER_PORT),
        "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
        "spark.driver.cores": str(spec.driver.cores),
        "spark.driver.memory": f"{spec.driver.memory_mib}m",
        "spark.executor.instances": str(spec.executors.replicas),
        "spark.executor.cores": str(spec.executors.cores),
        "spark.executor.memory": f"{spec.executors.memory_mib}m",
        "spark.dynamicAllocation.enabled": "false",
        "spark.kubernetes.allocation.pods.allocator": "statefulset",
        "spark.kubernetes.executor.podTemplateFile": f"{CONF_DIR}/{POD_TEMPLATE_KEY}",
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        f"{prefix}.options.claimName": "OnDemand",
        f"{prefix}.options.storageClass": storage_class,
        f"{prefix}.options.sizeLimit": spec.state.size,
        f"{prefix}.mount.path": spec.state.mount_path,
        f"{prefix}.mount.readOnly": "false",
        # The claims outlive the driver: Spark must neither own nor delete them (see docstring).
        "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
        "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
        f"spark.kubernetes.executor.label.{APP_LABEL}": app,
        f"spark.kubernetes.executor.label.{ROLE_LABEL}": "executor",
        # Work items are pinned to executors through preferred locations (DESIGN.md).
        "spark.locality.wait": "3600s",
        "spark.ui.prometheus.enabled": "true",
    }
    conf.update(spec.spark_conf)
    return conf


def _escape_property(text: str, key: bool) -> str:
    out = text.replace("\\", "\\\\").replace("\n", "\\n")
    if key:
        out = out.replace("=", "\\=").replace(":", "\\:").replace(" ", "\\ ")
    elif out.startswith(" "):
        out = "\\" + out
    return out


def render_spark_defaults(conf: Mapping[str, str]) -> str:
    """A Java properties file, as spark-submit reads `spark-defaults.conf`."""
    lines = [f"{_escape_property(k, True)}={_escape_property(v, False)}" for k, v in sorted(conf.items())]
    return "# Written by the eddy operator; edit the StreamApp instead.\n" + "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# Pods


def _kafka_secret_env(spec: StreamAppSpec) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = []
    sasl = spec.kafka.security.sasl
    if sasl is not None:
        for var, ref in (("EDDY_KAFKA_SASL_USERNAME", sasl.username), ("EDDY_KAFKA_SASL_PASSWORD", sasl.password)):
            env.append({"name": var, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    tls = spec.kafka.security.tls
    if tls is not None:
        for var, tls_ref, file in (
            ("EDDY_KAFKA_SSL_CA_LOCATION", tls.ca, "ca.crt"),
            ("EDDY_KAFKA_SSL_CERTIFICATE_LOCATION", tls.cert, "client.crt"),
            ("EDDY_KAFKA_SSL_KEY_LOCATION", tls.key, "client.key"),
        ):
            if tls_ref is not None:
                env.append({"name": var, "value": f"{KAFKA_TLS_DIR}/{file}"})
    return env


def _kafka_tls_volume(spec: StreamAppSpec) -> list[dict[str, Any]]:
    tls = spec.kafka.security.tls
    if tls is None:
        return []
    refs: list[tuple[SecretKeyRef, str]] = [
        (ref, file)
        for ref, file in ((tls.ca, "ca.crt"), (tls.cert, "client.crt"), (tls.key, "client.key"))
        if ref is not None
    ]
    if not refs:
        return []
    sources = [
        {"secret": {"name": ref.name, "items": [{"key": ref.key, "path": file, "mode": 0o440}]}} for ref, file in refs
    ]
    return [{"name": "kafka-tls", "projected": {"sources": sources}}]


def _common_env(spec: StreamAppSpec) -> list[dict[str, Any]]:
    return [
        {"name": "EDDY_APP", "value": spec.name},
        {"name": "EDDY_NAMESPACE", "value": spec.namespace},
        {"name": "EDDY_STATE_DIR", "value": spec.state.mount_path},
        {"name": "EDDY_METRICS_PORT", "value": str(spec.metrics_port)},
        {"name": "EDDY_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        # Python caches and Spark scratch go to the writable /tmp, never the image.
        {"name": "HOME", "value": "/tmp"},
        *_kafka_secret_env(spec),
    ]


def _pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_USER,
        # The state claim is writable by the executor's group.
        "fsGroup": RUN_AS_USER,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _container_security_context() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _memory_with_overhead_mib(memory_mib: int) -> int:
    # Spark's rule for the JVM's off-heap share (10%, at least 384 MiB); the Python process
    # lives in the same container.
    return memory_mib + max(384, memory_mib // 10)


def build_executor_pod_template(spec: StreamAppSpec) -> dict[str, Any]:
    """The executor pod template Spark starts from (it adds image, resources, env, the state
    claim's mount and its own labels): placement, security, metrics, the app's environment."""
    app = spec.name
    selector = executor_selector(app)
    tolerations = [t.to_k8s() for t in spec.executors.tolerations]
    pod_spec: dict[str, Any] = {
        "serviceAccountName": executor_service_account_name(app),
        "automountServiceAccountToken": False,
        "securityContext": _pod_security_context(),
        "terminationGracePeriodSeconds": 30,
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": selector},
                        },
                    }
                ]
            }
        },
        # Spread over zones, so standbys in other zones exist for the assignor to choose.
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": spec.executors.zone_topology_key,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": selector},
            }
        ],
        "containers": [
            {
                "name": EXECUTOR_CONTAINER,
                "ports": [{"name": "metrics", "containerPort": spec.metrics_port}],
                "env": _common_env(spec),
                "securityContext": _container_security_context(),
                "volumeMounts": [
                    {"name": "tmp", "mountPath": "/tmp"},
                    *(
                        [{"name": "kafka-tls", "mountPath": KAFKA_TLS_DIR, "readOnly": True}]
                        if _kafka_tls_volume(spec)
                        else []
                    ),
                ],
            }
        ],
        "volumes": [{"name": "tmp", "emptyDir": {}}, *_kafka_tls_volume(spec)],
    }
    if spec.executors.node_selector:
        pod_spec["nodeSelector"] = dict(spec.executors.node_selector)
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "labels": app_labels(app, "executor"),
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(spec.metrics_port),
                "prometheus.io/path": "/metrics",
            },
        },
        "spec": pod_spec,
    }


def streamapp_document(spec_manifest: Mapping[str, Any], spec: StreamAppSpec) -> dict[str, Any]:
    """The manifest the driver loads, with only the metadata it needs."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": spec.name, "namespace": spec.namespace},
        "spec": dict(spec_manifest),
    }


def build_conf_configmap(
    spec: StreamAppSpec, owner: Owner, storage_class: str, spec_manifest: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(spec, owner, conf_configmap_name(spec.name), "driver"),
        "data": {
            SPARK_DEFAULTS_KEY: render_spark_defaults(build_spark_conf(spec, storage_class)),
            POD_TEMPLATE_KEY: yaml.safe_dump(build_executor_pod_template(spec), sort_keys=True),
            STREAMAPP_KEY: yaml.safe_dump(streamapp_document(spec_manifest, spec), sort_keys=True),
        },
    }


def config_hash(spec: StreamAppSpec, storage_class: str, spec_manifest: Mapping[str, Any]) -> str:
    """What the driver was started with, minus the executor count: scaling patches the executor
    StatefulSet directly instead of restarting the driver."""
    conf = build_spark_conf(spec, storage_class)
    conf.pop("spark.executor.instances")
    manifest = json.loads(json.dumps(spec_manifest))
    executors = manifest.get("executors")
    if isinstance(executors, dict):
        executors.pop("replicas", None)
        if not executors:
            del manifest["executors"]
    doc = {"conf": conf, "template": build_executor_pod_template(spec), "manifest": manifest}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def build_driver_statefulset(spec: StreamAppSpec, owner: Owner, conf_hash: str) -> dict[str, Any]:
    app = spec.name
    memory = _memory_with_overhead_mib(spec.driver.memory_mib)
    env = [
        *_common_env(spec),
        {"name": "EDDY_STREAMAPP", "value": f"{CONF_DIR}/{STREAMAPP_KEY}"},
        {"name": "SPARK_CONF_DIR", "value": CONF_DIR},
        {"name": "EDDY_ASSIGNMENT_CONFIGMAP", "value": channel.assignment_configmap_name(app)},
        {"name": "EDDY_RUNTIME_STATE_CONFIGMAP", "value": channel.runtime_state_configmap_name(app)},
        {"name": "EDDY_MODE", "value": "kubernetes"},
    ]
    mounts = [
        {"name": "conf", "mountPath": CONF_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "conf", "configMap": {"name": conf_configmap_name(app)}},
        {"name": "tmp", "emptyDir": {}},
        *_kafka_tls_volume(spec),
    ]
    if _kafka_tls_volume(spec):
        mounts.append({"name": "kafka-tls", "mountPath": KAFKA_TLS_DIR, "readOnly": True})
    pod_labels = {**app_labels(app, "driver"), **driver_selector(app)}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(spec, owner, driver_name(app), "driver"),
        "spec": {
            "serviceName": driver_name(app),
            "replicas": 1,
            "selector": {"matchLabels": driver_selector(app)},
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {
                        CONFIG_HASH_ANNOTATION: conf_hash,
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(spec.metrics_port),
                    },
                },
                "spec": {
                    "serviceAccountName": driver_name(app),
                    "securityContext": _pod_security_context(),
                    "terminationGracePeriodSeconds": 60,
                    "containers": [
                        {
                            "name": DRIVER_CONTAINER,
                            "image": spec.image,
                            "imagePullPolicy": spec.image_pull_policy,
                            # No command: the image's entrypoint (tini) runs these args as given.
                            "args": ["eddy", "driver", "--streamapp", f"{CONF_DIR}/{STREAMAPP_KEY}"],
                            "env": env,
                            "ports": [
                                {"name": "driver-rpc", "containerPort": DRIVER_PORT},
                                {"name": "blockmanager", "containerPort": BLOCK_MANAGER_PORT},
                                {"name": "ui", "containerPort": UI_PORT},
                                {"name": "metrics", "containerPort": spec.metrics_port},
                            ],
                            # Spark's RPC port opens once the SparkContext is up; Spark waits for this
                            # readiness before creating executors.
                            "readinessProbe": {
                                "tcpSocket": {"port": DRIVER_PORT},
                                "periodSeconds": 5,
                                "failureThreshold": 3,
                            },
                            # /healthz (eddy_runtime.health, beside /metrics) fails when no micro-batch
                            # started or finished for max(120 s, 20 x triggerInterval). The startup probe
                            # covers the SparkSession's start, before the endpoint is served.
                            "startupProbe": {
                                "httpGet": {"path": "/healthz", "port": "metrics"},
                                "periodSeconds": 10,
                                "failureThreshold": 60,
                            },
                            "livenessProbe": {
                                "httpGet": {"path": "/healthz", "port": "metrics"},
                                "periodSeconds": 10,
                                "timeoutSeconds": 5,
                                "failureThreshold": 3,
                            },
                            "resources": {
                                "requests": {"cpu": str(spec.driver.cores), "memory": f"{memory}Mi"},
                                "limits": {"memory": f"{memory}Mi"},
                            },
                            "securityContext": _container_security_context(),
                            "volumeMounts": mounts,
                        }
                    ],
                    "volumes": volumes,
                },
            },
        },
    }


# ---------------------------------------------------------------------------------------
# Channel ConfigMaps


def build_channel_configmap(
    spec: StreamAppSpec, owner: Owner, name: str, channel_kind: str, data: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The assignment or runtime-state ConfigMap (`channel_kind`: assignment | runtime-state).
    The operator creates both, so both are owned and garbage-collected with the app."""
    meta = _metadata(spec, owner, name, None)
    meta["labels"][channel.LABEL_CHANNEL] = channel_kind
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    if data:
        body["data"] = dict(data)
    return body


def build_runtime_state_configmap(spec: StreamAppSpec, owner: Owner) -> dict[str, Any]:
    return build_channel_configmap(spec, owner, channel.runtime_state_configmap_name(spec.name), "runtime-state")


def build_assignment_configmap(spec: StreamAppSpec, owner: Owner, data: Mapping[str, str]) -> dict[str, Any]:
    return build_channel_configmap(spec, owner, channel.assignment_configmap_name(spec.name), "assignment", data)


def build_all(
    spec: StreamAppSpec, owner: Owner, storage_class: str, spec_manifest: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Everything a StreamApp becomes at reconcile time, in creation order (the assignment
    ConfigMap comes later, from the first assignment)."""
    return [
        build_driver_service_account(spec, owner),
        build_executor_service_account(spec, owner),
        build_driver_role(spec, owner),
        build_driver_role_binding(spec, owner),
        build_driver_service(spec, owner),
        build_executor_service(spec, owner),
        build_executor_pdb(spec, owner),
        build_conf_configmap(spec, owner, storage_class, spec_manifest),
        build_runtime_state_configmap(spec, owner),
        build_driver_statefulset(spec, owner, config_hash(spec, storage_class, spec_manifest)),
    ]
