"""The pure builders: what a StreamApp becomes, checked object by object without a cluster."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from eddy_contract.spec import StreamAppSpec, load_streamapp_file
from eddy_operator import builders, pod_builders, spark_builders
from eddy_operator.builders import Owner
from tests.operator.manifests import full, minimal

pytestmark = pytest.mark.unit

OWNER = Owner("wordcount", "1234-uid")


def objects(body=None, storage_class="standard"):
    body = body or minimal()
    body["metadata"].setdefault("namespace", "apps")
    spec = StreamAppSpec.from_manifest(body)
    return spec, spark_builders.build_all(spec, Owner(spec.name, "1234-uid"), storage_class, body["spec"])


def by_kind(objs):
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def test_every_object_is_owned_by_the_streamapp_and_lives_in_its_namespace():
    _, objs = objects()
    for o in objs:
        (ref,) = o["metadata"]["ownerReferences"]
        assert ref == {
            "apiVersion": "eddy.dev/v1alpha1",
            "kind": "StreamApp",
            "name": "wordcount",
            "uid": "1234-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert o["metadata"]["namespace"] == "apps"
        assert o["metadata"]["labels"]["eddy.dev/app"] == "wordcount"


def test_a_streamapp_becomes_driver_rbac_services_pdb_config_and_driver_statefulset():
    _, objs = objects()
    assert sorted(by_kind(objs)) == sorted(
        [
            ("ServiceAccount", "wordcount-driver"),
            ("ServiceAccount", "wordcount-executor"),
            ("Role", "wordcount-driver"),
            ("RoleBinding", "wordcount-driver"),
            ("Service", "wordcount-driver"),
            ("Service", "wordcount-executors"),
            ("PodDisruptionBudget", "wordcount-executors"),
            ("ConfigMap", "wordcount-spark-conf"),
            ("ConfigMap", "wordcount-runtime-state"),
            ("StatefulSet", "wordcount-driver"),
        ]
    )


def test_driver_role_lets_spark_run_executors_from_a_statefulset():
    _, objs = objects()
    rules = by_kind(objs)[("Role", "wordcount-driver")]["rules"]
    allowed = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    for needed in [
        ("", "pods", "create"),
        ("", "pods", "delete"),
        ("", "pods", "patch"),
        ("", "configmaps", "update"),
        ("", "services", "create"),
        ("apps", "statefulsets", "create"),
        ("apps", "statefulsets/scale", "patch"),
    ]:
        assert needed in allowed
    assert ("", "persistentvolumeclaims", "delete") not in allowed  # state volumes are not the driver's


def test_spark_conf_uses_the_statefulset_allocator_with_a_state_claim_spark_never_deletes():
    spec, _ = objects()
    conf = spark_builders.build_spark_conf(spec, "fast")
    assert conf["spark.kubernetes.allocation.pods.allocator"] == "statefulset"
    assert conf["spark.app.id"] == "wordcount"
    assert conf["spark.kubernetes.driver.pod.name"] == "wordcount-driver-0"
    assert conf["spark.driver.host"] == "wordcount-driver-0.wordcount-driver.apps.svc"
    pvc = "spark.kubernetes.executor.volumes.persistentVolumeClaim.state"
    assert conf[f"{pvc}.options.claimName"] == "OnDemand"
    assert conf[f"{pvc}.options.storageClass"] == "fast"
    assert conf[f"{pvc}.options.sizeLimit"] == "1Gi"
    assert conf[f"{pvc}.mount.path"] == "/var/lib/eddy/state"
    assert conf["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"
    assert conf["spark.executor.instances"] == "2"
    assert conf["spark.executor.memory"] == "1024m"
    assert builders.state_claim_name("wordcount", 1) == "state-spark-s-wordcount-0-1"


def test_executor_jvms_start_light_and_a_restarted_one_waits_for_the_driver_s_block_manager():
    """Both JVMs' JIT at C1 unless sparkConf says otherwise; the executor container knows the
    driver port that opens once the driver's scheduler takes registrations (docker/entrypoint.sh)."""
    spec, _ = objects()
    conf = spark_builders.build_spark_conf(spec, "fast")
    assert conf["spark.executor.extraJavaOptions"] == conf["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1"
    own = minimal()
    own["spec"]["sparkConf"] = {"spark.executor.extraJavaOptions": "-XX:+UseG1GC"}
    assert spark_builders.build_spark_conf(StreamAppSpec.from_manifest(own), "fast")[
        "spark.executor.extraJavaOptions"] == "-XX:+UseG1GC"
    (container,) = pod_builders.build_executor_pod_template(spec)["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["EDDY_DRIVER_READY_PORT"] == conf["spark.driver.blockManager.port"]
    assert env["EDDY_RUNNER_OUTLIVES_EXECUTOR"] == "1"


def test_user_spark_conf_passes_through_and_properties_are_escaped():
    spec = StreamAppSpec.from_manifest(full())
    conf = spark_builders.build_spark_conf(spec, "fast-ssd")
    assert conf["spark.sql.shuffle.partitions"] == "8"
    text = spark_builders.render_spark_defaults({"a:b": "x=y", "k": " lead\\"})
    assert "a\\:b=x=y" in text
    assert "k=\\ lead\\\\" in text


def test_executor_pod_template_spreads_over_zones_and_carries_placement_and_metrics():
    spec = StreamAppSpec.from_manifest(full())
    t = pod_builders.build_executor_pod_template(spec)
    s = t["spec"]
    assert s["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert s["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"][
        "labelSelector"
    ]["matchLabels"] == {"spark-app-selector": "orders", "spark-role": "executor"}
    assert s["nodeSelector"] == {"pool": "stream"}
    assert s["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "stream", "effect": "NoSchedule"}]
    assert s["securityContext"]["runAsNonRoot"] is True and s["securityContext"]["fsGroup"] == 185
    assert s["automountServiceAccountToken"] is False
    (c,) = s["containers"]
    assert c["name"] == "executor"
    assert c["ports"] == [{"name": "metrics", "containerPort": 9200}]
    env = {e["name"]: e for e in c["env"]}
    assert env["EDDY_STATE_DIR"]["value"] == "/state"
    assert env["EDDY_KAFKA_SASL_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "kafka-user", "key": "password"}}
    assert env["EDDY_KAFKA_SSL_CA_LOCATION"]["value"] == "/opt/eddy/kafka-tls/ca.crt"
    assert {"name": "kafka-tls", "mountPath": "/opt/eddy/kafka-tls", "readOnly": True} in c["volumeMounts"]
    assert t["metadata"]["annotations"]["prometheus.io/port"] == "9200"
    # a stopping pod hands its actives over first, within its grace period
    hook = c["lifecycle"]["preStop"]["exec"]["command"]
    assert hook[:3] == ["python", "-m", "eddy_runtime.executor.handover"]
    assert int(hook[hook.index("--timeout") + 1]) + 20 <= s["terminationGracePeriodSeconds"]


def test_credentials_never_appear_as_plain_values():
    _, objs = objects(full())
    text = yaml.safe_dump(objs)
    assert "hunter" not in text
    for o in objs:
        if o["kind"] == "StatefulSet":
            env = o["spec"]["template"]["spec"]["containers"][0]["env"]
            assert all("value" in e or "valueFrom" in e for e in env)


def test_driver_statefulset_runs_eddy_driver_with_conf_and_manifest_mounted():
    _, objs = objects()
    sts = by_kind(objs)[("StatefulSet", "wordcount-driver")]
    assert sts["spec"]["replicas"] == 1
    assert sts["spec"]["serviceName"] == "wordcount-driver"
    pod = sts["spec"]["template"]
    assert pod["metadata"]["labels"]["eddy.dev/role"] == "driver"
    (c,) = pod["spec"]["containers"]
    assert "command" not in c  # the image's entrypoint runs the args
    assert c["args"][:2] == ["eddy", "driver"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["SPARK_CONF_DIR"] == "/opt/eddy/conf"
    assert env["EDDY_ASSIGNMENT_CONFIGMAP"] == "wordcount-assignment"
    assert env["EDDY_RUNTIME_STATE_CONFIGMAP"] == "wordcount-runtime-state"
    assert c["resources"]["limits"]["memory"] == "1408Mi"  # 1Gi + 384Mi overhead
    assert pod["spec"]["serviceAccountName"] == "wordcount-driver"


def test_driver_is_restarted_when_its_batch_loop_stops_but_not_while_spark_starts():
    _, objs = objects()
    (c,) = by_kind(objs)[("StatefulSet", "wordcount-driver")]["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("livenessProbe", "startupProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}, probe
    assert ports["metrics"] == 9108  # served by eddy_runtime.protocol.health beside /metrics
    # the startup probe allows 10 minutes for the SparkSession before liveness counts
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] == 600
    assert c["livenessProbe"]["periodSeconds"] * c["livenessProbe"]["failureThreshold"] == 30


def test_the_driver_can_load_the_streamapp_it_is_given(tmp_path):
    body = minimal()
    body["metadata"]["namespace"] = "apps"
    _, objs = objects(body)
    cm = by_kind(objs)[("ConfigMap", "wordcount-spark-conf")]
    path = tmp_path / "streamapp.yaml"
    path.write_text(cm["data"]["streamapp.yaml"])
    assert load_streamapp_file(path) == StreamAppSpec.from_manifest(body)
    template = yaml.safe_load(cm["data"]["executor-pod-template.yaml"])
    assert template["kind"] == "Pod"
    assert "spark.kubernetes.allocation.pods.allocator=statefulset" in cm["data"]["spark-defaults.conf"]


def test_changes_that_apply_in_place_do_not_change_the_config_hash_but_others_do():
    body = minimal()
    spec = StreamAppSpec.from_manifest(body)
    h = spark_builders.config_hash(spec, "std", body["spec"])

    def hashed(**changes: Any) -> str:
        changed = minimal(**changes)
        return spark_builders.config_hash(StreamAppSpec.from_manifest(changed), "std", changed["spec"])

    # each applies without restarting the driver (eddy_contract.upgrade.IN_PLACE_FIELDS)
    assert hashed(executors={"replicas": 5}) == h
    assert hashed(state={"standbyReplicas": 0, "acceptableRecoveryLag": 50, "maxWarmupReplicas": 3}) == h
    assert hashed(triggerInterval="2s") == h
    assert hashed(badRecordPolicy="skip") == h
    # these need a new driver and executors
    assert hashed(image="eddy:0.2.0") != h
    assert hashed(sparkConf={"spark.sql.shuffle.partitions": "8"}) != h


def test_pdb_lets_one_executor_go_at_a_time():
    _, objs = objects()
    pdb = by_kind(objs)[("PodDisruptionBudget", "wordcount-executors")]
    assert pdb["spec"] == {
        "maxUnavailable": 0,
        "selector": {"matchLabels": {"spark-app-selector": "wordcount", "spark-role": "executor"}},
    }


def test_driver_service_is_headless_and_publishes_before_readiness():
    _, objs = objects()
    svc = by_kind(objs)[("Service", "wordcount-driver")]["spec"]
    assert svc["clusterIP"] == "None" and svc["publishNotReadyAddresses"] is True
    assert {p["name"] for p in svc["ports"]} == {"driver-rpc", "blockmanager", "ui", "metrics"}


def test_the_driver_pod_requests_what_spark_kubernetes_driver_request_cores_says_else_its_cores():
    def driver_cpu(**spark_conf: str) -> str:
        body = full()
        body["spec"]["sparkConf"] = {**body["spec"].get("sparkConf", {}), **spark_conf}
        spec = StreamAppSpec.from_manifest(body)
        pod = pod_builders.build_driver_statefulset(spec, OWNER, "h")["spec"]["template"]["spec"]
        return str(pod["containers"][0]["resources"]["requests"]["cpu"])

    assert driver_cpu() == str(StreamAppSpec.from_manifest(full()).driver.cores)
    assert driver_cpu(**{"spark.kubernetes.driver.request.cores": "300m"}) == "300m"


def test_the_executors_cpu_becomes_sparks_pod_request_and_limit():
    spec = StreamAppSpec.from_manifest(minimal(executors={"cpu": {"request": "250m", "limit": "500m"}}))
    conf = spark_builders.build_spark_conf(spec, "fast")
    assert conf["spark.kubernetes.executor.request.cores"] == "250m"
    assert conf["spark.kubernetes.executor.limit.cores"] == "500m"
    plain = spark_builders.build_spark_conf(StreamAppSpec.from_manifest(minimal()), "fast")
    assert "spark.kubernetes.executor.limit.cores" not in plain
