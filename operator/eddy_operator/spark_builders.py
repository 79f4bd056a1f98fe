"""Pure builders of the Spark configuration a StreamApp's driver starts with (the
`<app>-spark-conf` ConfigMap and its hash), and `build_all`: every object of the app, in creation
order (docs/DESIGN.md, "The operator's part"). The pods are `eddy_operator.pod_builders`', names,
labels and the supporting objects `eddy_operator.builders`'.

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
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import yaml

from eddy_contract.driver_jvm import DRIVER_JAVA_OPTIONS, EXECUTOR_JAVA_OPTIONS
from eddy_contract.spec import API_VERSION, KIND, StreamAppSpec
from eddy_contract.upgrade import IN_PLACE_FIELDS
from eddy_operator.builders import (
    APP_LABEL,
    BLOCK_MANAGER_PORT,
    CONF_DIR,
    DRIVER_PORT,
    EXECUTOR_CONTAINER,
    POD_TEMPLATE_KEY,
    ROLE_LABEL,
    SPARK_DEFAULTS_KEY,
    STATE_VOLUME,
    STREAMAPP_KEY,
    Owner,
    build_driver_role,
    build_driver_role_binding,
    build_driver_service,
    build_driver_service_account,
    build_executor_pdb,
    build_executor_service,
    build_executor_service_account,
    build_runtime_state_configmap,
    conf_configmap_name,
    driver_name,
    driver_pod_name,
    executor_service_account_name,
    object_metadata,
    spark_app_id,
)
from eddy_operator.pod_builders import build_driver_statefulset, build_executor_pod_template

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
        "spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS,
        "spark.executor.extraJavaOptions": EXECUTOR_JAVA_OPTIONS,
        "spark.executor.instances": str(spec.executors.replicas),
        "spark.executor.cores": str(spec.executors.cores),
        # spec.executors.cpu: the pods' CPU apart from the cores Spark schedules by
        **({"spark.kubernetes.executor.request.cores": spec.executors.cpu_request}
           if spec.executors.cpu_request else {}),
        **({"spark.kubernetes.executor.limit.cores": spec.executors.cpu_limit} if spec.executors.cpu_limit else {}),
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
        # The executors outlive a driver restart (docs/operations.md, "Upgrading an app"): a stopping
        # driver deletes neither their pods nor their StatefulSet, and their pod template has no
        # per-driver ConfigMap, name prefix or local directory (Spark picks each anew per driver;
        # the local directory is the driver's SPARK_LOCAL_DIRS, eddy_operator.pod_builders),
        # so that the next driver's pod template is the same but for the driver's owner reference,
        # and it adopts the running pods instead of replacing them (eddy_runtime.driver.executor_set).
        "spark.kubernetes.executor.deleteOnTermination": "false",
        # Spark then labels the pod of an executor that failed `spark-exec-inactive` and leaves it
        # out of its pod snapshots for good; an Eddy pod lives on (its container restarts in
        # place, or a new driver adopts it), so every executor it registered next would be "not
        # found in the cluster" this long after registering, and removed. Eddy learns of a dead
        # executor from its closed connection, the operator's probes (eddy_runtime.driver.
        # assignment_source) and Spark's heartbeat timeout: Spark's pod-snapshot check is off.
        "spark.kubernetes.executor.missingPodDetectDelta": "365d",
        "spark.kubernetes.executor.disableConfigMap": "true",
        "spark.kubernetes.executor.podNamePrefix": app,
        f"spark.kubernetes.executor.label.{APP_LABEL}": app,
        f"spark.kubernetes.executor.label.{ROLE_LABEL}": "executor",
        # Work items are pinned to executors through preferred locations (docs/DESIGN.md, "Placement facts").
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
        "metadata": object_metadata(spec, owner, conf_configmap_name(spec.name), "driver"),
        "data": {
            SPARK_DEFAULTS_KEY: render_spark_defaults(build_spark_conf(spec, storage_class)),
            POD_TEMPLATE_KEY: yaml.safe_dump(build_executor_pod_template(spec), sort_keys=True),
            STREAMAPP_KEY: yaml.safe_dump(streamapp_document(spec_manifest, spec), sort_keys=True),
        },
    }


def config_hash(spec: StreamAppSpec, storage_class: str, spec_manifest: Mapping[str, Any]) -> str:
    """What the driver was started with, minus what applies in place (eddy_contract.upgrade's
    IN_PLACE_FIELDS: the executor count, which patches the executor StatefulSet; the assignor's
    settings, which the operator reads; the driver's live settings, which it takes from the
    assignment ConfigMap): only a change of the rest rolls the driver."""
    conf = build_spark_conf(spec, storage_class)
    conf.pop("spark.executor.instances")
    manifest = json.loads(json.dumps(spec_manifest))
    for path in IN_PLACE_FIELDS:
        _drop(manifest, path.split(".")[1:])
    doc = {"conf": conf, "template": build_executor_pod_template(spec), "manifest": manifest}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def _drop(tree: dict[str, Any], path: list[str]) -> None:
    """Remove `path` from nested dicts, and the dicts it leaves empty."""
    head, *rest = path
    if head not in tree:
        return
    if rest:
        if isinstance(tree[head], dict):
            _drop(tree[head], rest)
            if not tree[head]:
                del tree[head]
    else:
        del tree[head]


def build_all(
    spec: StreamAppSpec, owner: Owner, storage_class: str, spec_manifest: Mapping[str, Any], hand_over: bool = True
) -> list[dict[str, Any]]:
    """Everything a StreamApp becomes at reconcile time, in creation order (the assignment
    ConfigMap comes later, from the first assignment). `hand_over`: the operator empties drained
    nodes itself (eddy_operator.drains)."""
    return [
        build_driver_service_account(spec, owner),
        build_executor_service_account(spec, owner),
        build_driver_role(spec, owner),
        build_driver_role_binding(spec, owner),
        build_driver_service(spec, owner),
        build_executor_service(spec, owner),
        build_executor_pdb(spec, owner, hand_over),
        build_conf_configmap(spec, owner, storage_class, spec_manifest),
        build_runtime_state_configmap(spec, owner),
        build_driver_statefulset(spec, owner, config_hash(spec, storage_class, spec_manifest)),
    ]
