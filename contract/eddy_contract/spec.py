"""The `StreamApp` spec as typed, frozen Python values: parsing, defaults and validation.

Who reads it: the operator (every reconcile starts with `StreamAppSpec.from_manifest(body)`)
and the runtime's driver, which in local mode reads the very YAML a user would `kubectl apply`
(`load_streamapp_file(path)`). The CustomResourceDefinition in `crds/streamapp.yaml` carries
the same defaults and rules for the apiserver; `DEFAULTS` below is the Python side of that
contract and a unit test checks that the two agree field by field.

This module is pure: no kopf, no kubernetes client. Its API is stable: add fields, do not
rename them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

GROUP = "eddy.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "StreamApp"
PLURAL = "streamapps"

# Defaults by manifest path; the CRD's `default:` values must equal these (tests/operator checks).
DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "spec.imagePullPolicy": "IfNotPresent",
        "spec.pipeline.function": "build",
        "spec.kafka.security.protocol": "PLAINTEXT",
        "spec.kafka.topics.replicationFactor": -1,
        "spec.processingGuarantee": "exactly_once",
        "spec.triggerInterval": "1s",
        "spec.badRecordPolicy": "fail",
        "spec.executors.replicas": 2,
        "spec.executors.cores": 1,
        "spec.executors.memory": "1Gi",
        "spec.executors.zoneTopologyKey": "topology.kubernetes.io/zone",
        "spec.driver.cores": 1,
        "spec.driver.memory": "1Gi",
        "spec.state.size": "1Gi",
        "spec.state.mountPath": "/var/lib/eddy/state",
        "spec.state.standbyReplicas": 1,
        "spec.state.acceptableRecoveryLag": 10000,
        "spec.state.maxWarmupReplicas": 2,
        "spec.state.retainVolumesOnDelete": True,
        "spec.metricsPort": 9108,
    }
)

# Spark settings that the executors/driver sections own; setting them in sparkConf would make
# the operator and Spark disagree about how many executors exist and where they run.
RESERVED_SPARK_CONF: frozenset[str] = frozenset(
    {
        "spark.master",
        "spark.submit.deployMode",
        "spark.executor.instances",
        "spark.dynamicAllocation.enabled",
        "spark.kubernetes.namespace",
        "spark.kubernetes.container.image",
        "spark.kubernetes.executor.podTemplateFile",
    }
)

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

# Kafka client settings that carry credentials: only Secret references may provide them.
_SECRET_CONFIG_WORDS = ("password", "secret", "sasl.jaas.config", "ssl.key.pem", "ssl.keystore")

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# Same patterns as the CRD's: positive numbers only ("0s" and "0Gi" are rejected by the apiserver too).
_POSITIVE = r"([1-9][0-9]*(\.[0-9]+)?|0\.[0-9]*[1-9][0-9]*)"
_DURATION_RE = re.compile(rf"^{_POSITIVE}(ms|s|m|h)$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
# A subset of Kubernetes quantities that is unambiguous for memory and disk sizes.
_QUANTITY_RE = re.compile(rf"^{_POSITIVE}(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
_QUANTITY_UNITS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}
_LABEL_KEY_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
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
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    sasl: SaslSpec | None = None
    tls: TlsSpec | None = None


@dataclass(frozen=True)
class TopicsSpec:
    """How Eddy creates the topics it writes: changelogs, repartition, dead-letter and outputs.

    `replication_factor` -1 leaves it to the brokers' `default.replication.factor` (Kafka
    Streams' `replication.factor=-1`); `min_insync_replicas` None leaves the topic config to the
    brokers' default."""

    replication_factor: int = -1
    min_insync_replicas: int | None = None


@dataclass(frozen=True)
class KafkaSpec:
    bootstrap_servers: str
    security: KafkaSecuritySpec = field(default_factory=KafkaSecuritySpec)
    topics: TopicsSpec = field(default_factory=TopicsSpec)
    # Extra client properties (librdkafka names), never credentials.
    config: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class PipelineSpec:
    """Where the user's pipeline lives: `module.function(**args)` returns the topology."""

    module: str
    function: str = "build"
    args: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Toleration:
    key: str | None = None
    operator: str = "Equal"
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
class ExecutorsSpec:
    replicas: int = 2
    cores: int = 1
    memory: str = "1Gi"
    node_selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    tolerations: tuple[Toleration, ...] = ()
    zone_topology_key: str = "topology.kubernetes.io/zone"

    @property
    def memory_mib(self) -> int:
        return quantity_to_mib(self.memory)


@dataclass(frozen=True)
class DriverSpec:
    cores: int = 1
    memory: str = "1Gi"

    @property
    def memory_mib(self) -> int:
        return quantity_to_mib(self.memory)


@dataclass(frozen=True)
class StateSpec:
    """The executors' state volumes and the KIP-441 placement settings."""

    storage_class: str | None = None
    size: str = "1Gi"
    mount_path: str = "/var/lib/eddy/state"
    standby_replicas: int = 1
    acceptable_recovery_lag: int = 10000
    max_warmup_replicas: int = 2
    # Volumes hold the only warm copy of the stores; losing them on an accidental delete
    # costs a full changelog restore, so keeping them is the default.
    retain_volumes_on_delete: bool = True

    @property
    def size_bytes(self) -> int:
        return quantity_to_bytes(self.size)


@dataclass(frozen=True)
class StreamAppSpec:
    """A parsed, defaulted and validated StreamApp (metadata name/namespace included)."""

    name: str
    namespace: str
    image: str
    pipeline: PipelineSpec
    kafka: KafkaSpec
    application_id: str
    image_pull_policy: str = "IfNotPresent"
    processing_guarantee: ProcessingGuarantee = ProcessingGuarantee.EXACTLY_ONCE
    # Also the commit cadence: each micro-batch commits as one unit (see REMOVED_FIELDS).
    trigger_interval_s: float = 1.0
    bad_record_policy: BadRecordPolicy = BadRecordPolicy.FAIL
    # Set exactly when the policy is dead-letter (defaults to `<applicationId>-dlq`).
    dead_letter_topic: str | None = None
    executors: ExecutorsSpec = field(default_factory=ExecutorsSpec)
    driver: DriverSpec = field(default_factory=DriverSpec)
    state: StateSpec = field(default_factory=StateSpec)
    spark_conf: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    metrics_port: int = 9108
    generation: int | None = None

    @property
    def effective_standby_replicas(self) -> int:
        """Standbys that can actually be placed: one copy per executor at most."""
        return min(self.state.standby_replicas, max(self.executors.replicas - 1, 0))

    def with_bootstrap_servers(self, servers: str) -> StreamAppSpec:
        """The same app against other brokers (local mode points the example at its own broker)."""
        return replace(self, kafka=replace(self.kafka, bootstrap_servers=servers))

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> StreamAppSpec:
        """Parse a StreamApp manifest (as applied, or as read back from the apiserver).

        Applies the CRD's defaults and checks what the CRD checks; raises `SpecError`
        naming the field and the reason."""
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
# Units


def parse_duration(text: str, field_path: str = "duration") -> float:
    """'500ms', '1s', '1.5m', '2h' -> seconds."""
    m = _DURATION_RE.match(text) if isinstance(text, str) else None
    if not m:
        raise SpecError(field_path, f"{text!r} is not a duration like 500ms, 1s, 2m or 1h")
    seconds = float(m.group(1)) * _DURATION_UNITS[m.group(3)]
    if seconds <= 0:
        raise SpecError(field_path, "must be greater than zero")
    return seconds


def quantity_to_bytes(text: str, field_path: str = "quantity") -> int:
    """A Kubernetes quantity such as '512Mi', '1Gi' or '2G' in bytes."""
    m = _QUANTITY_RE.match(text) if isinstance(text, str) else None
    if not m:
        raise SpecError(field_path, f"{text!r} is not a size like 512Mi, 1Gi or 2G")
    value = int(float(m.group(1)) * _QUANTITY_UNITS[m.group(3)])
    if value <= 0:
        raise SpecError(field_path, "must be greater than zero")
    return value


def quantity_to_mib(text: str, field_path: str = "quantity") -> int:
    """Rounded up to whole MiB, the unit Spark's memory settings take (`1024m`)."""
    return max(1, -(-quantity_to_bytes(text, field_path) // 2**20))


# ---------------------------------------------------------------------------------------
# Parsing


class _Fields:
    """Reads one object of the manifest, naming fields by their path in errors."""

    def __init__(self, obj: Any, path: str, allowed: set[str]) -> None:
        if obj is None:
            obj = {}
        if not isinstance(obj, Mapping):
            raise SpecError(path, f"must be an object, got {type(obj).__name__}")
        unknown = sorted(set(obj) - allowed)
        if unknown:
            raise SpecError(f"{path}.{unknown[0]}", f"unknown field (known: {', '.join(sorted(allowed))})")
        self.obj = obj
        self.path = path

    def at(self, name: str) -> str:
        return f"{self.path}.{name}"

    def raw(self, name: str) -> Any:
        value = self.obj.get(name)
        if value is None and self.at(name) in DEFAULTS:
            return DEFAULTS[self.at(name)]
        return value

    def str_(
        self, name: str, required: bool = False, pattern: re.Pattern[str] | None = None, max_len: int = 253
    ) -> str | None:
        value = self.raw(name)
        if value is None or value == "":
            if required:
                raise SpecError(self.at(name), "required")
            return None
        if not isinstance(value, str):
            raise SpecError(self.at(name), f"must be a string, got {type(value).__name__}")
        if len(value) > max_len:
            raise SpecError(self.at(name), f"longer than {max_len} characters")
        if pattern is not None and not pattern.match(value):
            raise SpecError(self.at(name), f"{value!r} does not match {pattern.pattern}")
        return value

    def int_(self, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
        value = self.raw(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(self.at(name), f"must be an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise SpecError(self.at(name), f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise SpecError(self.at(name), f"must be at most {maximum}, got {value}")
        return value

    def bool_(self, name: str) -> bool:
        value = self.raw(name)
        if not isinstance(value, bool):
            raise SpecError(self.at(name), f"must be true or false, got {value!r}")
        return value

    def enum(self, name: str, enum: type[StrEnum]) -> Any:
        value = self.raw(name)
        try:
            return enum(value)
        except ValueError:
            choices = ", ".join(e.value for e in enum)
            raise SpecError(self.at(name), f"{value!r} is not one of {choices}") from None

    def str_map(self, name: str, key_pattern: re.Pattern[str] | None = None) -> Mapping[str, str]:
        value = self.obj.get(name) or {}
        if not isinstance(value, Mapping):
            raise SpecError(self.at(name), "must be a map of strings")
        out: dict[str, str] = {}
        for k, v in value.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise SpecError(f"{self.at(name)}.{k}", "keys and values must be strings")
            if key_pattern is not None and not key_pattern.match(k):
                raise SpecError(f"{self.at(name)}.{k}", f"key does not match {key_pattern.pattern}")
            out[k] = v
        return MappingProxyType(out)

    def quantity(self, name: str) -> str:
        value = self.str_(name, required=True)
        assert value is not None
        quantity_to_bytes(value, self.at(name))
        return value


def _parse_manifest(manifest: Mapping[str, Any]) -> StreamAppSpec:
    if not isinstance(manifest, Mapping):
        raise SpecError("(manifest)", "must be an object")
    if manifest.get("apiVersion", API_VERSION) != API_VERSION:
        raise SpecError("apiVersion", f"must be {API_VERSION}, got {manifest.get('apiVersion')!r}")
    if manifest.get("kind", KIND) != KIND:
        raise SpecError("kind", f"must be {KIND}, got {manifest.get('kind')!r}")
    meta = manifest.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise SpecError("metadata", "must be an object")
    name = meta.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name) or len(name) > 40:
        # 40: the name prefixes pods, services and topics that have their own length limits.
        raise SpecError("metadata.name", f"{name!r} must be a DNS label of at most 40 characters")
    namespace = meta.get("namespace") or "default"
    generation = meta.get("generation")

    spec_obj = manifest.get("spec")
    if isinstance(spec_obj, Mapping):
        for removed, reason in REMOVED_FIELDS.items():
            if removed in spec_obj:
                raise SpecError(f"spec.{removed}", reason)
    s = _Fields(
        manifest.get("spec"),
        "spec",
        {
            "image",
            "imagePullPolicy",
            "applicationId",
            "pipeline",
            "kafka",
            "processingGuarantee",
            "triggerInterval",
            "badRecordPolicy",
            "deadLetterTopic",
            "executors",
            "driver",
            "state",
            "sparkConf",
            "metricsPort",
        },
    )
    if manifest.get("spec") is None:
        raise SpecError("spec", "required")
    image = s.str_("image", required=True, max_len=512)
    pull = s.str_("imagePullPolicy")
    if pull not in ("Always", "IfNotPresent", "Never"):
        raise SpecError("spec.imagePullPolicy", f"{pull!r} is not one of Always, IfNotPresent, Never")
    application_id = s.str_("applicationId", pattern=_TOPIC_RE, max_len=200) or name

    pipeline = _parse_pipeline(s.obj.get("pipeline"))
    kafka = _parse_kafka(s.obj.get("kafka"))
    guarantee = s.enum("processingGuarantee", ProcessingGuarantee)
    trigger = parse_duration(s.str_("triggerInterval") or "", "spec.triggerInterval")
    policy = s.enum("badRecordPolicy", BadRecordPolicy)
    dlq = s.str_("deadLetterTopic", pattern=_TOPIC_RE, max_len=249)
    if policy is BadRecordPolicy.DEAD_LETTER:
        dlq = dlq or f"{application_id}-dlq"
    elif dlq is not None:
        raise SpecError("spec.deadLetterTopic", "only allowed when badRecordPolicy is dead-letter")

    executors = _parse_executors(s.obj.get("executors"))
    driver = _parse_driver(s.obj.get("driver"))
    state = _parse_state(s.obj.get("state"))
    if state.standby_replicas >= executors.replicas:
        raise SpecError(
            "spec.state.standbyReplicas",
            f"must be less than spec.executors.replicas ({executors.replicas}): "
            "a standby needs an executor other than the active's",
        )
    spark_conf = s.str_map("sparkConf")
    for key in spark_conf:
        if key in RESERVED_SPARK_CONF:
            raise SpecError(f"spec.sparkConf.{key}", "is set by the operator from spec.executors/spec.driver")
    metrics_port = s.int_("metricsPort", minimum=1024, maximum=65535)

    return StreamAppSpec(
        name=name,
        namespace=namespace,
        image=image or "",
        image_pull_policy=pull,
        application_id=application_id,
        pipeline=pipeline,
        kafka=kafka,
        processing_guarantee=guarantee,
        trigger_interval_s=trigger,
        bad_record_policy=policy,
        dead_letter_topic=dlq,
        executors=executors,
        driver=driver,
        state=state,
        spark_conf=spark_conf,
        metrics_port=metrics_port,
        generation=generation if isinstance(generation, int) else None,
    )


def _parse_pipeline(obj: Any) -> PipelineSpec:
    if obj is None:
        raise SpecError("spec.pipeline", "required")
    p = _Fields(obj, "spec.pipeline", {"module", "function", "args"})
    module = p.str_("module", required=True, pattern=_MODULE_RE)
    function = p.str_("function", pattern=_IDENT_RE)
    return PipelineSpec(module=module or "", function=function or "build", args=p.str_map("args"))


def _secret_ref(obj: Any, path: str, required: bool) -> SecretKeyRef | None:
    if obj is None:
        if required:
            raise SpecError(path, "required")
        return None
    r = _Fields(obj, path, {"name", "key"})
    name = r.str_("name", required=True, pattern=_NAME_RE_SUBDOMAIN)
    key = r.str_("key", required=True, pattern=_SECRET_KEY_RE)
    return SecretKeyRef(name=name or "", key=key or "")


_NAME_RE_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_SECRET_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")


def _parse_kafka(obj: Any) -> KafkaSpec:
    if obj is None:
        raise SpecError("spec.kafka", "required")
    k = _Fields(obj, "spec.kafka", {"bootstrapServers", "security", "config", "topics"})
    bootstrap = k.str_("bootstrapServers", required=True, max_len=2048)
    sec = _Fields(k.obj.get("security"), "spec.kafka.security", {"protocol", "sasl", "tls"})
    protocol = sec.enum("protocol", SecurityProtocol)
    sasl = None
    if sec.obj.get("sasl") is not None:
        sf = _Fields(
            sec.obj["sasl"], "spec.kafka.security.sasl", {"mechanism", "usernameSecretRef", "passwordSecretRef"}
        )
        if sf.obj.get("mechanism") is None:
            raise SpecError("spec.kafka.security.sasl.mechanism", "required")
        sasl = SaslSpec(
            mechanism=sf.enum("mechanism", SaslMechanism),
            username=_secret_ref(sf.obj.get("usernameSecretRef"), sf.at("usernameSecretRef"), True),  # type: ignore[arg-type]
            password=_secret_ref(sf.obj.get("passwordSecretRef"), sf.at("passwordSecretRef"), True),  # type: ignore[arg-type]
        )
    if protocol.uses_sasl and sasl is None:
        raise SpecError("spec.kafka.security.sasl", f"required when protocol is {protocol.value}")
    if not protocol.uses_sasl and sasl is not None:
        raise SpecError("spec.kafka.security.sasl", f"not allowed when protocol is {protocol.value}")
    tls = None
    if sec.obj.get("tls") is not None:
        tf = _Fields(sec.obj["tls"], "spec.kafka.security.tls", {"caSecretRef", "certSecretRef", "keySecretRef"})
        tls = TlsSpec(
            ca=_secret_ref(tf.obj.get("caSecretRef"), tf.at("caSecretRef"), False),
            cert=_secret_ref(tf.obj.get("certSecretRef"), tf.at("certSecretRef"), False),
            key=_secret_ref(tf.obj.get("keySecretRef"), tf.at("keySecretRef"), False),
        )
        if (tls.cert is None) != (tls.key is None):
            raise SpecError("spec.kafka.security.tls", "certSecretRef and keySecretRef go together")
        if not protocol.uses_tls:
            raise SpecError("spec.kafka.security.tls", f"not allowed when protocol is {protocol.value}")
    config = k.str_map("config")
    for key in config:
        if any(word in key.lower() for word in _SECRET_CONFIG_WORDS):
            raise SpecError(
                f"spec.kafka.config.{key}",
                "credentials must come from Secret references in spec.kafka.security",
            )
        if key == "bootstrap.servers":
            raise SpecError(f"spec.kafka.config.{key}", "use spec.kafka.bootstrapServers")
    return KafkaSpec(
        bootstrap_servers=bootstrap or "",
        security=KafkaSecuritySpec(protocol=protocol, sasl=sasl, tls=tls),
        config=config,
        topics=_parse_topics(k.obj.get("topics")),
    )


# Kafka keeps replication factors in a 16-bit signed integer.
_MAX_REPLICATION_FACTOR = 32767


def _parse_topics(obj: Any) -> TopicsSpec:
    t = _Fields(obj, "spec.kafka.topics", {"replicationFactor", "minInsyncReplicas"})
    rf = t.int_("replicationFactor", minimum=-1, maximum=_MAX_REPLICATION_FACTOR)
    if rf == 0:
        raise SpecError(t.at("replicationFactor"), "must be -1 (the brokers' default.replication.factor) or at least 1")
    min_isr = None
    if t.obj.get("minInsyncReplicas") is not None:
        min_isr = t.int_("minInsyncReplicas", minimum=1, maximum=_MAX_REPLICATION_FACTOR)
        if rf != -1 and min_isr > rf:
            raise SpecError(
                t.at("minInsyncReplicas"),
                f"must be at most replicationFactor ({rf}): with fewer replicas than that every write fails",
            )
    return TopicsSpec(replication_factor=rf, min_insync_replicas=min_isr)


_TOLERATION_OPERATORS = ("Equal", "Exists")
_TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _parse_executors(obj: Any) -> ExecutorsSpec:
    e = _Fields(
        obj, "spec.executors", {"replicas", "cores", "memory", "nodeSelector", "tolerations", "zoneTopologyKey"}
    )
    tolerations = []
    raw_tolerations = e.obj.get("tolerations") or []
    if not isinstance(raw_tolerations, list):
        raise SpecError("spec.executors.tolerations", "must be a list")
    for i, t in enumerate(raw_tolerations):
        tf = _Fields(t, f"spec.executors.tolerations[{i}]", {"key", "operator", "value", "effect", "tolerationSeconds"})
        op = tf.str_("operator") or "Equal"
        if op not in _TOLERATION_OPERATORS:
            raise SpecError(tf.at("operator"), f"{op!r} is not one of Equal, Exists")
        effect = tf.str_("effect")
        if effect is not None and effect not in _TOLERATION_EFFECTS:
            raise SpecError(tf.at("effect"), f"{effect!r} is not one of {', '.join(_TOLERATION_EFFECTS)}")
        seconds = tf.obj.get("tolerationSeconds")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
            raise SpecError(tf.at("tolerationSeconds"), "must be an integer")
        tolerations.append(
            Toleration(
                key=tf.str_("key", pattern=_LABEL_KEY_RE, max_len=316),
                operator=op,
                value=tf.str_("value", max_len=63),
                effect=effect,
                toleration_seconds=seconds,
            )
        )
    return ExecutorsSpec(
        replicas=e.int_("replicas", minimum=1, maximum=1000),
        cores=e.int_("cores", minimum=1, maximum=256),
        memory=e.quantity("memory"),
        node_selector=e.str_map("nodeSelector", key_pattern=_LABEL_KEY_RE),
        tolerations=tuple(tolerations),
        zone_topology_key=e.str_("zoneTopologyKey", required=True, pattern=_LABEL_KEY_RE, max_len=316) or "",
    )


def _parse_driver(obj: Any) -> DriverSpec:
    d = _Fields(obj, "spec.driver", {"cores", "memory"})
    return DriverSpec(cores=d.int_("cores", minimum=1, maximum=256), memory=d.quantity("memory"))


def _parse_state(obj: Any) -> StateSpec:
    st = _Fields(
        obj,
        "spec.state",
        {
            "storageClass",
            "size",
            "mountPath",
            "standbyReplicas",
            "acceptableRecoveryLag",
            "maxWarmupReplicas",
            "retainVolumesOnDelete",
        },
    )
    mount = st.str_("mountPath", required=True, max_len=1024) or ""
    if not mount.startswith("/"):
        raise SpecError("spec.state.mountPath", "must be an absolute path")
    return StateSpec(
        storage_class=st.str_("storageClass", pattern=_NAME_RE_SUBDOMAIN),
        size=st.quantity("size"),
        mount_path=mount,
        standby_replicas=st.int_("standbyReplicas", minimum=0, maximum=10),
        acceptable_recovery_lag=st.int_("acceptableRecoveryLag", minimum=0),
        max_warmup_replicas=st.int_("maxWarmupReplicas", minimum=1, maximum=100),
        retain_volumes_on_delete=st.bool_("retainVolumesOnDelete"),
    )
