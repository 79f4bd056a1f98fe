"""The `StreamApp` spec as typed, frozen Python values, made from a manifest that the CRD has
defaulted and validated (docs/DESIGN.md, "The operator's part").

Who reads it: the operator (every reconcile starts with `StreamAppSpec.from_manifest(body)`) and
the runtime's driver, which in local mode reads the very YAML a user would `kubectl apply`
(`load_streamapp_file(path)`). The schema, its defaults and its rules are the CRD's, applied by
`eddy_contract.crd`, and its CEL rules, by their Python twins in `eddy_contract.cel`; this module
adds the defaults that depend on other fields (applicationId, deadLetterTopic). Pure: no kopf, no
kubernetes client. Stable API: add fields, do not rename them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from eddy_contract.autoscaling import AutoscalingSpec, parse_autoscaling
from eddy_contract.units import DURATION_LIKE, SIZE_LIKE, parse_duration, quantity_to_mib
from eddy_contract.upgrade import ResetOffsets, UpgradeMode

GROUP = "eddy.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "StreamApp"
PLURAL = "streamapps"

# Fields that older manifests may still carry, with what to do instead. The CRD no longer
# declares them either, so the apiserver answers "unknown field" under strict validation.
REMOVED_FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "commitInterval": (
            "unknown field (removed): each micro-batch commits as one atomic unit (one Kafka "
            "transaction per task under exactly_once), so the commit cadence is spec.triggerInterval "
            "(what Kafka Streams calls commit.interval.ms); set triggerInterval instead"
        ),
    }
)

_LABEL_KEY = "a label key ([prefix/]name, like topology.kubernetes.io/zone)"
# What a value matching the CRD's pattern looks like, by field, for error messages.
_PATTERN_HINTS: Mapping[str, str] = MappingProxyType(
    {
        "spec.triggerInterval": DURATION_LIKE,
        "spec.upgrade.healthTimeout": DURATION_LIKE,
        "spec.state.nodeLossTimeout": DURATION_LIKE,
        "spec.autoscaling.catchUpDuration": DURATION_LIKE,
        "spec.autoscaling.metricsWindow": DURATION_LIKE,
        "spec.autoscaling.scaleOutStabilization": DURATION_LIKE,
        "spec.autoscaling.scaleInStabilization": DURATION_LIKE,
        "spec.executors.zoneTopologyKey": _LABEL_KEY,
        "spec.executors.tolerations[].key": _LABEL_KEY,
        "spec.executors.memory": SIZE_LIKE,
        "spec.driver.memory": SIZE_LIKE,
        "spec.state.size": SIZE_LIKE,
        "spec.state.mountPath": "an absolute path",
        "metadata.name": "a DNS label (lower-case letters, digits and '-')",
    }
)


class SpecError(ValueError):
    """An invalid StreamApp manifest: `field` is the manifest path (e.g. `spec.state.size`)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class ProcessingGuarantee(StrEnum):
    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


class BadRecordPolicy(StrEnum):
    FAIL = "fail"
    SKIP = "skip"
    DEAD_LETTER = "dead-letter"


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_sasl(self) -> bool:
        return self.value.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.value.endswith("SSL")


class SaslMechanism(StrEnum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


@dataclass(frozen=True)
class SecretKeyRef:
    """One key of a Secret in the StreamApp's namespace."""

    name: str
    key: str


@dataclass(frozen=True)
class SaslSpec:
    mechanism: SaslMechanism
    username: SecretKeyRef
    password: SecretKeyRef


@dataclass(frozen=True)
class TlsSpec:
    """CA bundle to trust, and optionally a client certificate and key (mutual TLS)."""

    ca: SecretKeyRef | None = None
    cert: SecretKeyRef | None = None
    key: SecretKeyRef | None = None


@dataclass(frozen=True)
class KafkaSecuritySpec:
    protocol: SecurityProtocol
    sasl: SaslSpec | None = None
    tls: TlsSpec | None = None


@dataclass(frozen=True)
class TopicsSpec:
    """How Eddy creates the topics it writes: changelogs, repartition, dead-letter and outputs.

    `replication_factor` -1 leaves it to the brokers' `default.replication.factor` (Kafka
    Streams' `replication.factor=-1`); `min_insync_replicas` None leaves the topic config to the
    brokers' default. The defaults here are the CRD's (tests/contract/test_spec.py checks)."""

    replication_factor: int = -1
    min_insync_replicas: int | None = None


@dataclass(frozen=True)
class KafkaSpec:
    bootstrap_servers: str
    security: KafkaSecuritySpec
    topics: TopicsSpec
    # Extra client properties (librdkafka names), never credentials.
    config: Mapping[str, str]


@dataclass(frozen=True)
class PipelineSpec:
    """Where the user's pipeline lives: `module.function(**args)` returns the topology."""

    module: str
    function: str
    args: Mapping[str, str]


@dataclass(frozen=True)
class Toleration:
    operator: str
    key: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None

    def to_k8s(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator}
        if self.key is not None:
            out["key"] = self.key
        if self.value is not None:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


@dataclass(frozen=True)
class PodResources:
    """CPU cores and memory of one Spark JVM's pod (the driver's or each executor's)."""

    cores: int
    memory: str

    @property
    def memory_mib(self) -> int:
        return quantity_to_mib(self.memory)


@dataclass(frozen=True)
class ExecutorsSpec(PodResources):
    replicas: int
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]
    zone_topology_key: str
    #: the pods' CPU request and limit (quantities), when set apart from `cores`
    cpu_request: str | None = None
    cpu_limit: str | None = None


@dataclass(frozen=True)
class DriverSpec(PodResources):
    """The driver pod's resources."""


@dataclass(frozen=True)
class StateSpec:
    """The executors' state volumes and the KIP-441 placement settings."""

    size: str
    mount_path: str
    standby_replicas: int
    acceptable_recovery_lag: int
    max_warmup_replicas: int
    # Volumes hold the only warm copy of the stores; losing them on an accidental delete
    # costs a full changelog restore, so keeping them is the CRD's default.
    retain_volumes_on_delete: bool
    storage_class: str | None = None
    #: a node NotReady this long: the app's pods on it go, and their node-local claims are released
    #: (eddy_operator.node_loss)
    node_loss_timeout_s: float = 60.0


@dataclass(frozen=True)
class UpgradeSpec:
    """How a change of the app rolls out (eddy_contract.upgrade; docs/operations.md, "Upgrading an
    app"). The defaults are the CRD's (tests/contract/test_spec.py checks); the CRD gives
    `spec.upgrade` none of its own, so an app that never mentions it is stored without it."""

    mode: UpgradeMode = UpgradeMode.KEEP_STATE
    #: resetChangedState: where a reset sub-topology's input starts
    reset_offsets: ResetOffsets = ResetOffsets.EARLIEST
    #: go back to the previous version when the new one fails its health gate
    rollback: bool = True
    #: a new version that has not committed within this time is unhealthy
    health_timeout_s: float = 300.0


@dataclass(frozen=True)
class StreamAppSpec:
    """A parsed, defaulted and validated StreamApp (metadata name/namespace included)."""

    name: str
    namespace: str
    image: str
    pipeline: PipelineSpec
    kafka: KafkaSpec
    application_id: str
    image_pull_policy: str
    processing_guarantee: ProcessingGuarantee
    # Also the commit cadence: each micro-batch commits as one unit (see REMOVED_FIELDS).
    trigger_interval_s: float
    bad_record_policy: BadRecordPolicy
    executors: ExecutorsSpec
    driver: DriverSpec
    state: StateSpec
    spark_conf: Mapping[str, str]
    metrics_port: int
    #: "continuous" (sub-topologies without DataFrame steps run in the task runners without
    #: stopping) or "microBatch" (every sub-topology runs as Spark micro-batches)
    execution: str = "continuous"
    upgrade: UpgradeSpec = UpgradeSpec()
    autoscaling: AutoscalingSpec = AutoscalingSpec()
    # Set exactly when the policy is dead-letter (defaults to `<applicationId>-dlq`).
    dead_letter_topic: str | None = None
    generation: int | None = None

    def with_bootstrap_servers(self, servers: str) -> StreamAppSpec:
        """The same app against other brokers (local mode points the example at its own broker)."""
        return replace(self, kafka=replace(self.kafka, bootstrap_servers=servers))

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> StreamAppSpec:
        """Parse a StreamApp manifest (as applied, or as read back from the apiserver).

        Applies the CRD's defaults and checks its schema and rules; raises `SpecError` naming
        the field and the reason."""
        return _parse_manifest(manifest)


def load_streamapp_file(path: str | Path) -> StreamAppSpec:
    """Read a YAML file holding a StreamApp (the first StreamApp document if several)."""
    import yaml  # PyYAML; imported here so that importing the module stays cheap

    text = Path(path).read_text()
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    for doc in docs:
        if isinstance(doc, Mapping) and doc.get("kind") == KIND:
            return StreamAppSpec.from_manifest(doc)
    raise SpecError("kind", f"no document of kind {KIND} in {path}")


# ---------------------------------------------------------------------------------------
# Parsing


def _parse_manifest(manifest: Mapping[str, Any]) -> StreamAppSpec:
    if not isinstance(manifest, Mapping):
        raise SpecError("(manifest)", "must be an object")
    if manifest.get("apiVersion", API_VERSION) != API_VERSION:
        raise SpecError("apiVersion", f"must be {API_VERSION}, got {manifest.get('apiVersion')!r}")
    if manifest.get("kind", KIND) != KIND:
        raise SpecError("kind", f"must be {KIND}, got {manifest.get('kind')!r}")
    if isinstance(manifest.get("spec"), Mapping):
        for removed, reason in REMOVED_FIELDS.items():
            if removed in manifest["spec"]:
                raise SpecError(f"spec.{removed}", reason)
    # Imported here: the task runner and Spark's Python workers import this module for its types
    # and never parse a manifest, and the schema and the CEL rules (jsonschema, yaml) were 0.13 s
    # of every such process' start.
    from eddy_contract import cel, crd

    body = crd.with_defaults(manifest)
    for problem in crd.problems(body, _PATTERN_HINTS):
        raise SpecError(problem.field, problem.reason)
    meta = body.get("metadata") or {}
    # A CRD cannot require metadata fields; the apiserver always sets the name.
    name: str | None = meta.get("name")
    if name is None:
        raise SpecError("metadata.name", "required")
    for problem in cel.broken_rules(body):
        raise SpecError(problem.field, problem.reason)

    s = body["spec"]
    application_id: str = s.get("applicationId") or name
    policy = BadRecordPolicy(s["badRecordPolicy"])
    dead_letter = None
    if policy is BadRecordPolicy.DEAD_LETTER:
        dead_letter = s.get("deadLetterTopic") or f"{application_id}-dlq"
    generation = meta.get("generation")
    return StreamAppSpec(
        name=name,
        namespace=meta.get("namespace") or "default",
        image=s["image"],
        image_pull_policy=s["imagePullPolicy"],
        application_id=application_id,
        pipeline=PipelineSpec(
            module=s["pipeline"]["module"],
            function=s["pipeline"]["function"],
            args=MappingProxyType(s["pipeline"].get("args", {})),
        ),
        kafka=_kafka(s["kafka"]),
        processing_guarantee=ProcessingGuarantee(s["processingGuarantee"]),
        trigger_interval_s=parse_duration(s["triggerInterval"]),
        bad_record_policy=policy,
        dead_letter_topic=dead_letter,
        executors=_executors(s["executors"]),
        driver=DriverSpec(cores=s["driver"]["cores"], memory=s["driver"]["memory"]),
        state=_state(s["state"]),
        spark_conf=MappingProxyType(s.get("sparkConf", {})),
        metrics_port=s["metricsPort"],
        execution=s["execution"],
        upgrade=_upgrade(s.get("upgrade")),
        autoscaling=parse_autoscaling(s.get("autoscaling")),
        generation=generation if isinstance(generation, int) else None,
    )


def _upgrade(u: Mapping[str, Any] | None) -> UpgradeSpec:
    if u is None:
        return UpgradeSpec()
    return UpgradeSpec(
        mode=UpgradeMode(u["mode"]),
        reset_offsets=ResetOffsets(u["resetOffsets"]),
        rollback=u["rollback"],
        health_timeout_s=parse_duration(u["healthTimeout"]),
    )


def _secret_ref(obj: Mapping[str, Any]) -> SecretKeyRef:
    return SecretKeyRef(name=obj["name"], key=obj["key"])


def _optional_secret_ref(parent: Mapping[str, Any], name: str) -> SecretKeyRef | None:
    return _secret_ref(parent[name]) if name in parent else None


def _kafka(k: Mapping[str, Any]) -> KafkaSpec:
    sec = k["security"]
    sasl = tls = None
    if "sasl" in sec:
        sasl = SaslSpec(
            mechanism=SaslMechanism(sec["sasl"]["mechanism"]),
            username=_secret_ref(sec["sasl"]["usernameSecretRef"]),
            password=_secret_ref(sec["sasl"]["passwordSecretRef"]),
        )
    if "tls" in sec:
        t = sec["tls"]
        tls = TlsSpec(
            ca=_optional_secret_ref(t, "caSecretRef"),
            cert=_optional_secret_ref(t, "certSecretRef"),
            key=_optional_secret_ref(t, "keySecretRef"),
        )
    topics = k["topics"]
    return KafkaSpec(
        bootstrap_servers=k["bootstrapServers"],
        security=KafkaSecuritySpec(protocol=SecurityProtocol(sec["protocol"]), sasl=sasl, tls=tls),
        config=MappingProxyType(k.get("config", {})),
        topics=TopicsSpec(
            replication_factor=topics["replicationFactor"], min_insync_replicas=topics.get("minInsyncReplicas")
        ),
    )


def _executors(e: Mapping[str, Any]) -> ExecutorsSpec:
    tolerations = tuple(
        Toleration(
            operator=t["operator"],
            key=t.get("key"),
            value=t.get("value") or None,
            effect=t.get("effect"),
            toleration_seconds=t.get("tolerationSeconds"),
        )
        for t in e.get("tolerations", [])
    )
    return ExecutorsSpec(
        replicas=e["replicas"],
        cores=e["cores"],
        memory=e["memory"],
        node_selector=MappingProxyType(e.get("nodeSelector", {})),
        tolerations=tolerations,
        zone_topology_key=e["zoneTopologyKey"],
        cpu_request=(e.get("cpu") or {}).get("request"),
        cpu_limit=(e.get("cpu") or {}).get("limit"),
    )


def _state(st: Mapping[str, Any]) -> StateSpec:
    return StateSpec(
        # "" as well as absent: the cluster's default class (see eddy_operator.reconcile).
        storage_class=st.get("storageClass") or None,
        size=st["size"],
        mount_path=st["mountPath"],
        standby_replicas=st["standbyReplicas"],
        acceptable_recovery_lag=st["acceptableRecoveryLag"],
        max_warmup_replicas=st["maxWarmupReplicas"],
        retain_volumes_on_delete=st["retainVolumesOnDelete"],
        node_loss_timeout_s=parse_duration(st["nodeLossTimeout"]),
    )
