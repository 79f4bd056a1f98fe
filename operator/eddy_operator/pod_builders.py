"""Pure builders of a StreamApp's pods: the driver StatefulSet (one replica running `eddy driver`
as Spark's client-mode driver) and the pod template Spark starts each executor from
(docs/DESIGN.md, "The operator's part"; names and labels are `eddy_operator.builders`').

Contract with the runtime's driver (environment of the driver container): `EDDY_STREAMAPP`
(the manifest path), `SPARK_CONF_DIR`, `EDDY_APP`, `EDDY_NAMESPACE`, `EDDY_ASSIGNMENT_CONFIGMAP`,
`EDDY_RUNTIME_STATE_CONFIGMAP`, `EDDY_METRICS_PORT`, `EDDY_POD_NAME`; both driver and executors get
`EDDY_STATE_DIR` and Kafka credentials as `EDDY_KAFKA_SASL_USERNAME` / `EDDY_KAFKA_SASL_PASSWORD`
(from the Secrets) and TLS files under `/opt/eddy/kafka-tls/` (`EDDY_KAFKA_SSL_*_LOCATION`).
"""

from __future__ import annotations

from typing import Any

from eddy_contract import channel
from eddy_contract.spec import SecretKeyRef, StreamAppSpec
from eddy_operator.builders import (
    BLOCK_MANAGER_PORT,
    CONF_DIR,
    CONFIG_HASH_ANNOTATION,
    DRIVER_CONTAINER,
    DRIVER_PORT,
    EXECUTOR_CONTAINER,
    KAFKA_TLS_DIR,
    PUSH_TOKEN_KEY,
    RUN_AS_USER,
    STREAMAPP_KEY,
    UI_PORT,
    Owner,
    app_labels,
    conf_configmap_name,
    driver_name,
    driver_selector,
    executor_selector,
    executor_service_account_name,
    executor_statefulset_name,
    object_metadata,
    push_token_secret_name,
)


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


def _kafka_tls_mounts(spec: StreamAppSpec) -> list[dict[str, Any]]:
    return [{"name": "kafka-tls", "mountPath": KAFKA_TLS_DIR, "readOnly": True}] if _kafka_tls_volume(spec) else []


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


#: Spark's setting of the driver pod's CPU request (``spark.driver.cores`` otherwise): the operator
#: builds the driver pod, so it reads it as Spark would
DRIVER_REQUEST_CORES = "spark.kubernetes.driver.request.cores"
#: how long a stopping executor pod waits for its runner to hand its actives over (preStop)
HANDOVER_TIMEOUT_S = 20


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
        # the hand-over before the stop (HANDOVER_TIMEOUT_S), then the JVM and the runner's close (20 s)
        "terminationGracePeriodSeconds": HANDOVER_TIMEOUT_S + 30,
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
                # the task runner outlives the executor JVM and the driver; a JVM started again
                # waits for the next driver's block manager port, open once its scheduler takes
                # registrations (docker/entrypoint.sh)
                "env": [*_common_env(spec), {"name": "EDDY_RUNNER_OUTLIVES_EXECUTOR", "value": "1"},
                        {"name": "EDDY_DRIVER_READY_PORT", "value": str(BLOCK_MANAGER_PORT)}],
                # Ready once its task runner's copies are warm (eddy_runtime.executor.runner's
                # READY_PATH): a rolling upgrade replaces the next pod only then (eddy_operator.rollout),
                # and the disruption budget counts a cold executor as unavailable.
                "readinessProbe": {
                    "httpGet": {"path": "/ready", "port": "metrics"},
                    "periodSeconds": 2,
                    "failureThreshold": 1,
                },
                # A pod going away (a rolling upgrade, an eviction, a drain) is no live executor for
                # the operator, which moves its actives to caught-up copies at once; the container
                # stops only once its runner let them go (eddy_runtime.executor.handover).
                "lifecycle": {"preStop": {"exec": {"command": [
                    "python", "-m", "eddy_runtime.executor.handover", "--timeout", str(HANDOVER_TIMEOUT_S)]}}},
                "securityContext": _container_security_context(),
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *_kafka_tls_mounts(spec)],
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
        # Spark's local directory, the driver's and (mounted from an emptyDir) the executors': fixed, so
        # that each driver's executor pod template is the same (eddy_runtime.driver.executor_set)
        {"name": "SPARK_LOCAL_DIRS", "value": "/tmp/spark-local"},
        # the same for every driver of the app: a new one asks the runners of the last to let go
        {"name": "EDDY_PUSH_TOKEN",
         "valueFrom": {"secretKeyRef": {"name": push_token_secret_name(app), "key": PUSH_TOKEN_KEY}}},
        # the executors outlive a driver restart: the new driver adopts their StatefulSet
        {"name": "EDDY_EXECUTOR_STATEFULSET", "value": executor_statefulset_name(app)},
        {"name": "EDDY_APP_UID", "value": owner.uid},
        # the version it runs, named in its upgrade gate's verdict (eddy_runtime.driver.upgrade_gate)
        {"name": "EDDY_CONFIG_HASH",
         "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{CONFIG_HASH_ANNOTATION}']"}}},
    ]
    mounts = [
        {"name": "conf", "mountPath": CONF_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
        *_kafka_tls_mounts(spec),
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "conf", "configMap": {"name": conf_configmap_name(app)}},
        {"name": "tmp", "emptyDir": {}},
        *_kafka_tls_volume(spec),
    ]
    pod_labels = {**app_labels(app, "driver"), **driver_selector(app)}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": object_metadata(spec, owner, driver_name(app), "driver"),
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
                            # /healthz (eddy_runtime.protocol.health, beside /metrics) fails when no micro-batch
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
                                # Spark's own setting of its driver pod's CPU request, as Spark reads it
                                "requests": {"cpu": spec.spark_conf.get(DRIVER_REQUEST_CORES, str(spec.driver.cores)),
                                             "memory": f"{memory}Mi"},
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
