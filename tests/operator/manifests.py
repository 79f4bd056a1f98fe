"""StreamApp manifests shared by the operator's tests (plain dicts, as a user would write them)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CRD_PATH = REPO / "crds" / "streamapp.yaml"


def crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_PATH.read_text())


def crd_schema() -> dict[str, Any]:
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def minimal(name: str = "wordcount", **spec: Any) -> dict[str, Any]:
    """The smallest valid StreamApp; keyword arguments override top-level spec fields."""
    body: dict[str, Any] = {
        "apiVersion": "eddy.dev/v1alpha1",
        "kind": "StreamApp",
        "metadata": {"name": name},
        "spec": {
            "image": "eddy:0.1.0",
            "pipeline": {"module": "examples.wordcount.app"},
            "kafka": {"bootstrapServers": "kafka:9092"},
        },
    }
    body["spec"].update(copy.deepcopy(spec))
    return body


def full(name: str = "orders") -> dict[str, Any]:
    """A StreamApp that sets every field."""
    return {
        "apiVersion": "eddy.dev/v1alpha1",
        "kind": "StreamApp",
        "metadata": {"name": name, "namespace": "shop", "generation": 3},
        "spec": {
            "image": "registry.local/eddy:1.2",
            "imagePullPolicy": "Always",
            "applicationId": "orders-v2",
            "pipeline": {"module": "shop.pipelines", "function": "orders", "args": {"input": "orders"}},
            "kafka": {
                "bootstrapServers": "b1:9093,b2:9093",
                "security": {
                    "protocol": "SASL_SSL",
                    "sasl": {
                        "mechanism": "SCRAM-SHA-512",
                        "usernameSecretRef": {"name": "kafka-user", "key": "username"},
                        "passwordSecretRef": {"name": "kafka-user", "key": "password"},
                    },
                    "tls": {"caSecretRef": {"name": "kafka-ca", "key": "ca.crt"}},
                },
                "config": {"compression.type": "zstd"},
                "topics": {"replicationFactor": 3, "minInsyncReplicas": 2},
            },
            "processingGuarantee": "at_least_once",
            "triggerInterval": "500ms",
            "execution": "continuous",
            "badRecordPolicy": "dead-letter",
            "deadLetterTopic": "orders-bad",
            "executors": {
                "replicas": 4,
                "cores": 2,
                "memory": "2Gi",
                "nodeSelector": {"pool": "stream"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "stream", "effect": "NoSchedule"}],
                "zoneTopologyKey": "topology.kubernetes.io/zone",
            },
            "driver": {"cores": 1, "memory": "1536Mi"},
            "state": {
                "storageClass": "fast-ssd",
                "size": "20Gi",
                "mountPath": "/state",
                "standbyReplicas": 2,
                "acceptableRecoveryLag": 5000,
                "maxWarmupReplicas": 1,
                "retainVolumesOnDelete": False,
                "nodeLossTimeout": "5m",
            },
            "sparkConf": {"spark.sql.shuffle.partitions": "8"},
            "metricsPort": 9200,
        },
    }


# Manifests that break one CEL rule of the CRD each (a change to `minimal()`'s spec), with the
# field the Python twin names: tests/contract checks the twins, the integration tests the apiserver.
RULE_BREAKERS: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    ("standbys", lambda s: s.update(state={"standbyReplicas": 2}), "spec.state.standbyReplicas"),
    ("dead-letter", lambda s: s.update(deadLetterTopic="dlq"), "spec.deadLetterTopic"),
    ("sasl", lambda s: s["kafka"].update(security={"protocol": "SASL_SSL"}), "spec.kafka.security.sasl"),
    (
        "mtls",
        lambda s: s["kafka"].update(security={"protocol": "SSL", "tls": {"certSecretRef": {"name": "c", "key": "k"}}}),
        "spec.kafka.security.tls",
    ),
    (
        "bootstrap",
        lambda s: s["kafka"].update(config={"bootstrap.servers": "x:1"}),
        "spec.kafka.config.bootstrap.servers",
    ),
    (
        "label-key",
        lambda s: s.update(executors={"nodeSelector": {"not a key": "x"}}),
        "spec.executors.nodeSelector.not a key",
    ),
    (
        "autoscaling-bounds",
        lambda s: s.update(autoscaling={"minReplicas": 4, "maxReplicas": 3}),
        "spec.autoscaling.minReplicas",
    ),
    (
        "cpu-request-over-limit",
        lambda s: s.update(executors={"cpu": {"request": "1500m", "limit": "1"}}),
        "spec.executors.cpu.request",
    ),
    (
        "cpu-twice",
        lambda s: s.update(executors={"cpu": {"limit": "1"}}, sparkConf={"spark.kubernetes.executor.limit.cores": "2"}),
        "spec.sparkConf",
    ),
]


def breaking(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    body = minimal()
    change(body["spec"])
    return body
