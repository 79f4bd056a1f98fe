"""The rules for a Kafka topic an app writes: what it must look like (`TopicRequirement`),
creating the missing ones, validating the ones that exist (docs/DESIGN.md, "Topics").

The driver calls `ensure_topics` once per start, before any task runs (driver/app_topics.py), with
the topics derived from the compiled pipeline: the stores' changelogs (state/changelog.py's
`ChangelogTopicSpec`), repartition topics, the dead-letter topic and the output topics. They are
created with `spec.kafka.topics` (replication factor, -1 passing the brokers' default through as
Kafka Streams does, and `min.insync.replicas`). Every creation error other than "already exists"
is raised; a topic that exists is described and checked, and a mismatch the app cannot live with
is an error naming the topic, what it needs and what was found -- never silently used.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eddy_contract.spec import TopicsSpec

__all__ = [
    "TopicCreationFailed",
    "TopicDescription",
    "TopicError",
    "TopicMismatch",
    "TopicRequirement",
    "describe_topics",
    "ensure_topics",
    "topic_problems",
]

log = logging.getLogger(__name__)

_TIMEOUT_S = 30.0
#: how long a topic created a moment ago may stay unknown to the broker answering metadata
_PROPAGATION_S = 10.0

# Why each kind of topic needs what it needs, for the error messages.
_PARTITIONS_WHY = {
    "changelog": "one per task: task S_P restores from partition P",
    "repartition": "one per task of the sub-topology it feeds",
}
_POLICY_WHY = {
    "changelog": "a changelog that is not compacted loses state",
    "repartition": "a compacted repartition topic can drop records before they are processed",
}


class TopicError(RuntimeError):
    """A topic the app writes cannot be used or made."""


class TopicMismatch(TopicError):
    """An existing topic does not match what the app needs (partitions, cleanup policy, replicas)."""


class TopicCreationFailed(TopicError):
    """The brokers refused to create a topic (other than because it already exists)."""


@dataclass(frozen=True)
class TopicRequirement:
    """One topic the app writes: how to create it and what an existing one must satisfy."""

    name: str
    #: changelog, repartition, dead-letter or output (names it in errors)
    role: str
    partitions: int
    #: the app depends on the partition count (changelogs, repartition topics)
    check_partitions: bool = False
    #: the cleanup.policy it is created with and must have (None: the brokers' default, not checked)
    cleanup_policy: str | None = None
    #: further topic configs it is created with (never checked)
    extra_config: tuple[tuple[str, str], ...] = ()
    #: an internal topic: replicas and min.insync.replicas are checked against spec.kafka.topics
    internal: bool = True

    def create_config(self, settings: TopicsSpec) -> dict[str, str]:
        cfg: dict[str, str] = {}
        if self.cleanup_policy is not None:
            cfg["cleanup.policy"] = self.cleanup_policy
        if settings.min_insync_replicas is not None:
            cfg["min.insync.replicas"] = str(settings.min_insync_replicas)
        cfg.update(dict(self.extra_config))
        return cfg


@dataclass(frozen=True)
class TopicDescription:
    """What the brokers say about an existing topic."""

    name: str
    partitions: int
    #: replicas of its least replicated partition
    replication_factor: int
    cleanup_policy: str
    min_insync_replicas: int


def _policy_set(policy: str) -> frozenset[str]:
    return frozenset(p.strip() for p in policy.split(",") if p.strip())


def topic_problems(req: TopicRequirement, found: TopicDescription, settings: TopicsSpec) -> list[str]:
    """Why an existing topic cannot serve `req` (empty: it can). Pure."""
    what = f"{req.role} topic {req.name!r}"
    problems: list[str] = []
    if req.check_partitions and found.partitions != req.partitions:
        problems.append(
            f"{what} has {found.partitions} partitions, the app needs {req.partitions} "
            f"({_PARTITIONS_WHY.get(req.role, 'one per task')}); delete it or fix the input topic"
        )
    if req.cleanup_policy is not None and _policy_set(found.cleanup_policy) != _policy_set(req.cleanup_policy):
        why = _POLICY_WHY.get(req.role)
        problems.append(
            f"{what} has cleanup.policy={found.cleanup_policy}, the app needs cleanup.policy={req.cleanup_policy}"
            + (f" ({why})" if why else "")
        )
    if req.internal and settings.replication_factor > found.replication_factor:
        problems.append(
            f"{what} has replication factor {found.replication_factor}, spec.kafka.topics.replicationFactor "
            f"asks for at least {settings.replication_factor}; add replicas (kafka-reassign-partitions) or "
            "delete it"
        )
    if (req.internal and settings.min_insync_replicas is not None
            and found.min_insync_replicas < settings.min_insync_replicas):
        problems.append(
            f"{what} has min.insync.replicas={found.min_insync_replicas}, spec.kafka.topics.minInsyncReplicas "
            f"asks for at least {settings.min_insync_replicas}; raise it with kafka-configs --alter"
        )
    if found.min_insync_replicas > found.replication_factor:
        problems.append(
            f"{what} has min.insync.replicas={found.min_insync_replicas} but only {found.replication_factor} "
            "replica(s): every write Eddy makes (acks=all) would fail; check "
            "spec.kafka.topics and the brokers' default.replication.factor"
        )
    return problems


def ensure_topics(admin: Any, requirements: Iterable[TopicRequirement],
                  settings: TopicsSpec | None = None) -> dict[str, bool]:
    """Create the missing topics, then describe every one and check it.

    Returns ``{topic: created}``. Raises `TopicCreationFailed` with every refusal (naming the
    topic, what was asked and the brokers' reason) and `TopicMismatch` with every problem
    `topic_problems` finds. A topic another client created meanwhile counts as existing.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported without __all__

    settings = settings or TopicsSpec()
    reqs = list(requirements)
    existing = admin.list_topics(timeout=_TIMEOUT_S).topics
    missing = [r for r in reqs if r.name not in existing]
    created: dict[str, bool] = {r.name: False for r in reqs}
    if missing:
        futures = admin.create_topics(
            [NewTopic(r.name, r.partitions, settings.replication_factor, config=r.create_config(settings))
             for r in missing],
            operation_timeout=_TIMEOUT_S, request_timeout=_TIMEOUT_S,
        )
        failures: list[str] = []
        for r in missing:
            try:
                futures[r.name].result(_TIMEOUT_S + 5)
            except KafkaException as e:
                err = e.args[0]
                if err.name() == "TOPIC_ALREADY_EXISTS":
                    continue
                failures.append(_creation_failure(r, settings, err))
                continue
            created[r.name] = True
            log.info("created %s topic %s (%d partitions, replication factor %s, %s)", r.role, r.name,
                     r.partitions, _rf_text(settings.replication_factor), r.create_config(settings) or "no configs")
        if failures:
            raise TopicCreationFailed("; ".join(failures))
    found = describe_topics(admin, [r.name for r in reqs])
    problems = [p for r in reqs for p in topic_problems(r, found[r.name], settings)]
    if problems:
        raise TopicMismatch("; ".join(problems))
    return created


def _rf_text(rf: int) -> str:
    return "the brokers' default" if rf == -1 else str(rf)


def _creation_failure(req: TopicRequirement, settings: TopicsSpec, err: Any) -> str:
    hint = ""
    if err.name() == "INVALID_REPLICATION_FACTOR":
        hint = "; spec.kafka.topics.replicationFactor must be at most the number of brokers"
    elif err.name() in ("TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"):
        hint = "; give the app's Kafka principal CREATE on it, or create it beforehand as described"
    elif err.name() == "INVALID_CONFIG":
        hint = "; check spec.kafka.topics"
    return (f"could not create {req.role} topic {req.name!r} ({req.partitions} partitions, replication factor "
            f"{_rf_text(settings.replication_factor)}, {req.create_config(settings) or 'no configs'}): "
            f"{err.name()}: {err.str()}{hint}")


def describe_topics(admin: Any, names: Sequence[str]) -> dict[str, TopicDescription]:
    """Partitions, replicas, cleanup.policy and min.insync.replicas of existing topics.

    A topic created a moment ago (here or by another driver) may not be known yet to the broker
    that answers, so "unknown topic" is retried for a few seconds; then it is an error.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]  # re-exported without __all__

    if not names:
        return {}
    deadline = time.monotonic() + _PROPAGATION_S
    while True:
        meta = admin.list_topics(timeout=_TIMEOUT_S).topics
        unknown = [n for n in names if n not in meta or meta[n].error is not None or not meta[n].partitions]
        configs: dict[str, Mapping[str, Any]] = {}
        if not unknown:
            futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, n) for n in names],
                                             request_timeout=_TIMEOUT_S)
            try:
                configs = {res.name: fut.result(_TIMEOUT_S) for res, fut in futures.items()}
            except KafkaException as e:
                if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise
                unknown = ["(configs)"]
        if not unknown:
            break
        if time.monotonic() >= deadline:
            raise TopicError(f"topics {', '.join(unknown)} are not known to the brokers "
                             f"{_PROPAGATION_S:.0f}s after they were listed or created")
        time.sleep(0.2)

    out: dict[str, TopicDescription] = {}
    for n in names:
        parts = meta[n].partitions.values()
        cfg = configs[n]
        policy = getattr(cfg.get("cleanup.policy"), "value", None) or "delete"
        min_isr = getattr(cfg.get("min.insync.replicas"), "value", None) or "1"
        out[n] = TopicDescription(n, len(parts), min(len(p.replicas) for p in parts), policy, int(min_isr))
    return out
