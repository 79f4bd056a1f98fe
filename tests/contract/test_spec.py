"""The StreamApp spec parser: the CRD's defaults and rules, invalid manifests named by field."""

from __future__ import annotations

import pytest

from eddy_contract.autoscaling import AutoscalingSpec
from eddy_contract.crd import with_defaults
from eddy_contract.spec import (
    BadRecordPolicy,
    ProcessingGuarantee,
    SaslMechanism,
    SecretKeyRef,
    SecurityProtocol,
    SpecError,
    StreamAppSpec,
    TopicsSpec,
    UpgradeSpec,
    load_streamapp_file,
)
from eddy_contract.units import parse_duration, quantity_to_bytes, quantity_to_mib
from eddy_contract.upgrade import ResetOffsets, UpgradeMode
from tests.operator.manifests import CRD_PATH, crd, full, minimal

pytestmark = pytest.mark.unit


def test_the_topics_defaults_the_runtime_uses_are_the_crds():
    assert StreamAppSpec.from_manifest(minimal()).kafka.topics == TopicsSpec()


def test_the_upgrade_defaults_are_the_crds_whether_spec_upgrade_is_absent_or_empty():
    assert StreamAppSpec.from_manifest(minimal()).upgrade == UpgradeSpec()
    assert StreamAppSpec.from_manifest(minimal(upgrade={})).upgrade == UpgradeSpec()
    assert UpgradeSpec() == UpgradeSpec(UpgradeMode.KEEP_STATE, ResetOffsets.EARLIEST, rollback=True,
                                        health_timeout_s=300.0)


def test_the_autoscaling_defaults_are_the_crds_and_it_is_off_unless_asked():
    assert StreamAppSpec.from_manifest(minimal()).autoscaling == AutoscalingSpec()
    assert StreamAppSpec.from_manifest(minimal(autoscaling={})).autoscaling == AutoscalingSpec()
    assert not AutoscalingSpec().enabled


def test_autoscaling_settings_are_read_and_min_above_max_is_refused():
    spec = StreamAppSpec.from_manifest(minimal(autoscaling={
        "enabled": True, "minReplicas": 2, "maxReplicas": 6, "targetUtilization": 60, "catchUpDuration": "2m",
        "metricsWindow": "30s", "scaleOutStabilization": "10s", "scaleInStabilization": "2m", "maxStep": 1}))
    assert spec.autoscaling == AutoscalingSpec(True, 2, 6, 60, 120.0, 30.0, 10.0, 120.0, 1)
    with pytest.raises(SpecError) as err:
        StreamAppSpec.from_manifest(minimal(autoscaling={"minReplicas": 5, "maxReplicas": 3}))
    assert err.value.field == "spec.autoscaling.minReplicas"
    assert "must not be more than maxReplicas" in err.value.reason


def test_upgrade_settings_are_read():
    spec = StreamAppSpec.from_manifest(minimal(upgrade={
        "mode": "resetChangedState", "resetOffsets": "latest", "rollback": False, "healthTimeout": "90s"}))
    assert spec.upgrade == UpgradeSpec(UpgradeMode.RESET_CHANGED_STATE, ResetOffsets.LATEST, rollback=False,
                                       health_timeout_s=90.0)


def test_manifest_defaulted_by_the_crd_parses_to_the_same_spec_as_the_bare_manifest():
    bare = minimal()
    defaulted = with_defaults(bare)
    assert defaulted != bare  # the CRD did fill something in
    assert StreamAppSpec.from_manifest(defaulted) == StreamAppSpec.from_manifest(bare)


def test_minimal_manifest_gets_kafka_streams_like_defaults():
    spec = StreamAppSpec.from_manifest(minimal())
    assert spec.name == "wordcount"
    assert spec.namespace == "default"
    assert spec.application_id == "wordcount"
    assert spec.pipeline.function == "build"
    assert spec.processing_guarantee is ProcessingGuarantee.EXACTLY_ONCE
    assert spec.trigger_interval_s == 1.0
    assert spec.bad_record_policy is BadRecordPolicy.FAIL
    assert spec.dead_letter_topic is None
    assert spec.executors.replicas == 2
    assert spec.executors.memory_mib == 1024
    assert spec.state.standby_replicas == 1
    assert spec.state.acceptable_recovery_lag == 10000
    assert spec.state.max_warmup_replicas == 2
    assert spec.state.retain_volumes_on_delete is True
    assert spec.kafka.security.protocol is SecurityProtocol.PLAINTEXT
    # Like Kafka Streams' replication.factor=-1: the brokers' default.replication.factor.
    assert spec.kafka.topics == TopicsSpec(replication_factor=-1, min_insync_replicas=None)


def test_full_manifest_keeps_every_field():
    spec = StreamAppSpec.from_manifest(full())
    assert spec.namespace == "shop"
    assert spec.generation == 3
    assert spec.application_id == "orders-v2"
    assert spec.pipeline.args == {"input": "orders"}
    assert spec.kafka.security.sasl is not None
    assert spec.kafka.security.sasl.mechanism is SaslMechanism.SCRAM_SHA_512
    assert spec.kafka.security.sasl.password == SecretKeyRef("kafka-user", "password")
    assert spec.kafka.security.tls is not None and spec.kafka.security.tls.ca == SecretKeyRef("kafka-ca", "ca.crt")
    assert spec.kafka.config == {"compression.type": "zstd"}
    assert spec.kafka.topics == TopicsSpec(replication_factor=3, min_insync_replicas=2)
    assert spec.processing_guarantee is ProcessingGuarantee.AT_LEAST_ONCE
    assert spec.trigger_interval_s == 0.5
    assert spec.dead_letter_topic == "orders-bad"
    assert spec.executors.tolerations[0].to_k8s() == {
        "key": "dedicated",
        "operator": "Equal",
        "value": "stream",
        "effect": "NoSchedule",
    }
    assert spec.executors.node_selector == {"pool": "stream"}
    assert spec.driver.memory_mib == 1536
    assert spec.state.storage_class == "fast-ssd"
    assert spec.state.size == "20Gi"
    assert spec.state.retain_volumes_on_delete is False
    assert spec.state.node_loss_timeout_s == 300
    assert spec.spark_conf == {"spark.sql.shuffle.partitions": "8"}
    assert spec.metrics_port == 9200


def test_full_manifest_is_a_fixed_point_of_crd_defaulting():
    assert with_defaults(full()) == full()


def test_dead_letter_policy_defaults_its_topic_from_the_application_id():
    spec = StreamAppSpec.from_manifest(minimal(badRecordPolicy="dead-letter"))
    assert spec.dead_letter_topic == "wordcount-dlq"


def test_spec_is_frozen():
    spec = StreamAppSpec.from_manifest(minimal())
    with pytest.raises(AttributeError):
        spec.image = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.spark_conf["x"] = "y"  # type: ignore[index]


_RF = "spec.kafka.topics.replicationFactor"
_MIN_ISR = "spec.kafka.topics.minInsyncReplicas"


@pytest.mark.parametrize(
    ("change", "field", "reason_part"),
    [
        (lambda s: s.pop("image"), "spec.image", "required"),
        (lambda s: s.update(image=""), "spec.image", "required"),
        (lambda s: s.pop("pipeline"), "spec.pipeline", "required"),
        (lambda s: s["pipeline"].update(module="not a module"), "spec.pipeline.module", "match"),
        (lambda s: s.pop("kafka"), "spec.kafka", "required"),
        (lambda s: s.update(state={"standbyReplicas": 2}), "spec.state.standbyReplicas", "less than"),
        (
            lambda s: s.update(executors={"replicas": 3}, state={"standbyReplicas": 3}),
            "spec.state.standbyReplicas",
            "less than",
        ),
        (lambda s: s.update(state={"size": "lots"}), "spec.state.size", "size like"),
        (lambda s: s.update(state={"size": "0Gi"}), "spec.state.size", "size like"),
        (lambda s: s.update(executors={"memory": "1gb"}), "spec.executors.memory", "size like"),
        (lambda s: s.update(executors={"replicas": 0}), "spec.executors.replicas", "at least 1"),
        (lambda s: s.update(executors={"replicas": "3"}), "spec.executors.replicas", "integer"),
        (lambda s: s.update(triggerInterval="fast"), "spec.triggerInterval", "duration"),
        (lambda s: s.update(commitInterval="30s"), "spec.commitInterval", "set triggerInterval instead"),
        (lambda s: s.update(processingGuarantee="exactly_twice"), "spec.processingGuarantee", "one of"),
        (lambda s: s.update(execution="streaming"), "spec.execution", "one of"),
        (lambda s: s.update(badRecordPolicy="ignore"), "spec.badRecordPolicy", "one of"),
        (lambda s: s.update(deadLetterTopic="dlq"), "spec.deadLetterTopic", "only allowed"),
        (lambda s: s.update(executor={"replicas": 3}), "spec.executor", "unknown field"),
        (lambda s: s["kafka"].update(security={"protocol": "SASL_SSL"}), "spec.kafka.security.sasl", "required"),
        (
            lambda s: s["kafka"].update(security={"protocol": "PLAINTEXT", "tls": {}}),
            "spec.kafka.security.tls",
            "only allowed",
        ),
        (lambda s: s["kafka"].update(config={"sasl.password": "hunter2"}), "spec.kafka.config.sasl.password", "Secret"),
        (lambda s: s["kafka"].update(topics={"replicationFactor": 0}), _RF, "-1"),
        (lambda s: s["kafka"].update(topics={"replicationFactor": -2}), _RF, "at least"),
        (lambda s: s["kafka"].update(topics={"replicationFactor": "3"}), _RF, "integer"),
        (lambda s: s["kafka"].update(topics={"minInsyncReplicas": 0}), _MIN_ISR, "at least 1"),
        (
            lambda s: s["kafka"].update(topics={"replicationFactor": 2, "minInsyncReplicas": 3}),
            _MIN_ISR,
            "at most replicationFactor",
        ),
        (lambda s: s["kafka"].update(topics={"replicas": 3}), "spec.kafka.topics.replicas", "unknown field"),
        (
            lambda s: s.update(sparkConf={"spark.executor.instances": "5"}),
            "spec.sparkConf.spark.executor.instances",
            "operator",
        ),
        (lambda s: s.update(state={"mountPath": "relative"}), "spec.state.mountPath", "absolute"),
        (lambda s: s.update(upgrade={"mode": "savepoint"}), "spec.upgrade.mode", "one of keepState"),
        (lambda s: s.update(upgrade={"resetOffsets": "none"}), "spec.upgrade.resetOffsets", "one of earliest"),
        (lambda s: s.update(upgrade={"rollback": "yes"}), "spec.upgrade.rollback", "true or false"),
        (lambda s: s.update(upgrade={"healthTimeout": "2 minutes"}), "spec.upgrade.healthTimeout", "duration like"),
        (lambda s: s.update(upgrade={"allowRenames": True}), "spec.upgrade.allowRenames", "unknown field"),
        (lambda s: s.update(state={"retainVolumesOnDelete": "yes"}), "spec.state.retainVolumesOnDelete", "true or"),
        (lambda s: s.update(state={"nodeLossTimeout": "a minute"}), "spec.state.nodeLossTimeout", "like 500ms"),
        (
            lambda s: s.update(executors={"tolerations": [{"operator": "Maybe"}]}),
            "spec.executors.tolerations[0].operator",
            "one of",
        ),
    ],
)
def test_invalid_manifest_is_rejected_naming_the_field(change, field, reason_part):
    body = minimal()
    change(body["spec"])
    with pytest.raises(SpecError) as err:
        StreamAppSpec.from_manifest(body)
    assert err.value.field == field
    assert reason_part in err.value.reason
    assert str(err.value).startswith(field + ": ")


def test_wrong_kind_and_bad_name_are_rejected():
    body = minimal()
    body["kind"] = "Deployment"
    with pytest.raises(SpecError, match="^kind: "):
        StreamAppSpec.from_manifest(body)
    with pytest.raises(SpecError, match=r"^metadata\.name: "):
        StreamAppSpec.from_manifest(minimal(name="Not_A_Label"))


def test_units_parse_like_kubernetes_and_spark():
    assert parse_duration("250ms") == 0.25
    assert parse_duration("2m") == 120.0
    assert quantity_to_bytes("1G") == 10**9
    assert quantity_to_bytes("512Mi") == 512 * 2**20
    assert quantity_to_mib("1.5Gi") == 1536
    assert quantity_to_mib("1M") == 1  # rounded up, never zero
    with pytest.raises(ValueError, match="is not a size like"):
        quantity_to_bytes("1gb")


def test_a_streamapp_yaml_file_loads_for_local_mode(tmp_path):
    import yaml

    path = tmp_path / "app.yaml"
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    path.write_text(yaml.safe_dump_all([other, minimal()]))
    assert load_streamapp_file(path) == StreamAppSpec.from_manifest(minimal())


def test_crd_names_do_not_collide_with_builtin_short_names():
    names = crd()["spec"]["names"]
    builtin_short = {
        "po",
        "svc",
        "deploy",
        "sts",
        "ds",
        "rs",
        "cm",
        "ns",
        "no",
        "pv",
        "pvc",
        "sa",
        "ep",
        "ing",
        "hpa",
        "pdb",
        "netpol",
        "sc",
        "crd",
        "csr",
        "ev",
        "limits",
        "quota",
        "rc",
        "cs",
        "psp",
        "pc",
        "cj",
    }
    assert names["shortNames"] == ["sapp"]
    assert not set(names["shortNames"]) & builtin_short
    assert CRD_PATH.exists()


def test_local_mode_can_point_an_app_at_another_broker():
    spec = StreamAppSpec.from_manifest(minimal()).with_bootstrap_servers("127.0.0.1:9092")
    assert spec.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert spec.kafka.security == StreamAppSpec.from_manifest(minimal()).kafka.security


def test_the_wordcount_example_is_a_valid_streamapp():
    spec = load_streamapp_file(CRD_PATH.parent.parent / "examples" / "wordcount" / "streamapp.yaml")
    assert spec.name == "wordcount"
    assert spec.executors.replicas == 3 and spec.state.standby_replicas == 1


def test_the_executors_cpu_is_read_and_checked_against_its_limit_and_spark_conf():
    spec = StreamAppSpec.from_manifest(minimal(executors={"cpu": {"request": "250m", "limit": "500m"}}))
    assert (spec.executors.cpu_request, spec.executors.cpu_limit) == ("250m", "500m")
    assert StreamAppSpec.from_manifest(minimal()).executors.cpu_request is None
    with pytest.raises(SpecError) as err:
        StreamAppSpec.from_manifest(minimal(executors={"cpu": {"request": "2", "limit": "500m"}}))
    assert (err.value.field, err.value.reason) == ("spec.executors.cpu.request", "must not be more than limit")
    with pytest.raises(SpecError) as err:
        StreamAppSpec.from_manifest(minimal(executors={"cpu": {"limit": "1"}},
                                            sparkConf={"spark.kubernetes.executor.limit.cores": "2"}))
    assert err.value.field == "spec.sparkConf" and "spec.executors.cpu" in err.value.reason
    with pytest.raises(SpecError) as err:
        StreamAppSpec.from_manifest(minimal(executors={"cpu": {"request": "half"}}))
    assert err.value.field == "spec.executors.cpu.request"
