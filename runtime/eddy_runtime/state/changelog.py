"""Changelog topics: naming, creating and validating `<app>-<store>-changelog`.

Every store write reaches its changelog before the store (commit.py), so the changelog is the
store's source of truth and a store on a lost volume is rebuilt from it (restore.py). A changelog
is compacted and has one partition per task, i.e. the input's partition count; the partition of
task ``S_P`` is ``P``. The driver (or the operator) calls `ensure_changelog_topics` before any
task opens its stores; a topic that exists with the wrong partition count or cleanup policy is an
error, never silently used, because restoring a task from the wrong partition corrupts it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

__all__ = [
    "ChangelogTopicMismatch",
    "ChangelogTopicMissing",
    "ChangelogTopicSpec",
    "changelog_topic_name",
    "ensure_changelog_topics",
    "topic_partition_count",
]

if TYPE_CHECKING:
    from eddy_runtime.state.store import StoreSpec

log = logging.getLogger(__name__)

CHANGELOG_SUFFIX = "-changelog"
_WINDOW_CHANGELOG_EXTRA_RETENTION_MS = 24 * 3600 * 1000
_TIMEOUT_S = 30.0


def changelog_topic_name(app: str, store: str) -> str:
    """Kafka Streams' name for a store's changelog: ``<app>-<store>-changelog``."""
    return f"{app}-{store}{CHANGELOG_SUFFIX}"


class ChangelogTopicMismatch(RuntimeError):
    """An existing changelog topic does not match what the store needs (partitions or policy)."""


class ChangelogTopicMissing(RuntimeError):
    """A changelog (or input) topic a task needs does not exist."""


@dataclass(frozen=True)
class ChangelogTopicSpec:
    """What one store's changelog topic must look like."""

    name: str
    partitions: int
    #: ``compact`` for key-value stores; ``compact,delete`` for window stores, whose old
    #: windows must also age out of the changelog (as Kafka Streams does).
    cleanup_policy: str = "compact"
    #: retention.ms for ``compact,delete`` topics; None leaves the broker default.
    retention_ms: int | None = None
    replication_factor: int = 1
    extra_config: tuple[tuple[str, str], ...] = ()

    @classmethod
    def for_store(cls, app: str, spec: StoreSpec, partitions: int) -> ChangelogTopicSpec:
        """The changelog a store needs: compacted; a window store's also deletes windows older
        than its retention plus a day (Kafka Streams' windowstore.changelog.additional.retention.ms)."""
        name = changelog_topic_name(app, spec.name)
        if spec.kind == "window":
            return cls(name, partitions, cleanup_policy="compact,delete",
                       retention_ms=int(spec.retention_ms or 0) + _WINDOW_CHANGELOG_EXTRA_RETENTION_MS)
        return cls(name, partitions)

    def config(self) -> dict[str, str]:
        cfg = {"cleanup.policy": self.cleanup_policy}
        if self.retention_ms is not None:
            cfg["retention.ms"] = str(self.retention_ms)
        cfg.update(dict(self.extra_config))
        return cfg


def topic_partition_count(admin: AdminClient, topic: str) -> int:
    """Partition count of an existing topic; `ChangelogTopicMissing` when it does not exist."""
    md = admin.list_topics(topic=topic, timeout=_TIMEOUT_S)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        raise ChangelogTopicMissing(f"topic {topic!r} does not exist")
    return len(t.partitions)


def _normalise_policy(policy: str) -> frozenset[str]:
    return frozenset(p.strip() for p in policy.split(",") if p.strip())


def ensure_changelog_topics(
    admin: AdminClient, specs: Iterable[ChangelogTopicSpec], *, create: bool = True
) -> dict[str, bool]:
    """Create missing changelog topics and validate existing ones.

    Returns ``{topic: created}``. Raises `ChangelogTopicMismatch` naming the topic, what it has
    and what the store needs when an existing topic has another partition count or cleanup
    policy, and `ChangelogTopicMissing` when `create` is false and a topic is absent.
    """
    specs = list(specs)
    existing = admin.list_topics(timeout=_TIMEOUT_S).topics
    missing = [s for s in specs if s.name not in existing]
    present = [s for s in specs if s.name in existing]
    result: dict[str, bool] = {}

    if missing and not create:
        names = ", ".join(s.name for s in missing)
        raise ChangelogTopicMissing(f"changelog topics missing: {names}")
    if missing:
        futures = admin.create_topics(
            [NewTopic(s.name, s.partitions, s.replication_factor, config=s.config()) for s in missing],
            operation_timeout=_TIMEOUT_S,
        )
        for spec in missing:
            try:
                futures[spec.name].result(_TIMEOUT_S)
                result[spec.name] = True
                log.info("created changelog topic %s (%d partitions, %s)", spec.name, spec.partitions,
                         spec.cleanup_policy)
            except KafkaException as e:
                # Another driver may have created it in the meantime: validate it like any other.
                if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
                    raise
                present.append(spec)

    if present:
        _validate(admin, present)
        for spec in present:
            result.setdefault(spec.name, False)
    return result


def _validate(admin: AdminClient, specs: list[ChangelogTopicSpec]) -> None:
    problems: list[str] = []
    for spec in specs:
        partitions, policy = _describe(admin, spec.name)
        if partitions != spec.partitions:
            problems.append(
                f"changelog topic {spec.name!r} has {partitions} partitions but the store needs "
                f"{spec.partitions} (one per input partition); delete it or fix the input topic"
            )
        if _normalise_policy(policy) != _normalise_policy(spec.cleanup_policy):
            problems.append(
                f"changelog topic {spec.name!r} has cleanup.policy={policy} but the store needs "
                f"cleanup.policy={spec.cleanup_policy}; a changelog that is not compacted loses state"
            )
    if problems:
        raise ChangelogTopicMismatch("; ".join(problems))


def _describe(admin: AdminClient, topic: str) -> tuple[int, str]:
    """(partition count, cleanup.policy) of an existing topic.

    A topic created a moment ago (by us or another driver) may not be known to the broker's
    metadata cache yet, so "unknown topic" is retried for a few seconds.
    """
    deadline = time.monotonic() + 10
    while True:
        try:
            partitions = topic_partition_count(admin, topic)
            fut = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)],
                                         request_timeout=_TIMEOUT_S)
            entries = next(iter(fut.values())).result(_TIMEOUT_S)
            entry = entries.get("cleanup.policy")
            return partitions, (getattr(entry, "value", None) or "delete")
        except (KafkaException, ChangelogTopicMissing) as e:
            unknown = isinstance(e, ChangelogTopicMissing) or e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            if not unknown or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
