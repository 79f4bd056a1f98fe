"""Changelog topics: naming `<app>-<store>-changelog` and what each must look like.

Every store write reaches its changelog before the store (the commit order, executor/commit.py),
so the changelog is the store's source of truth and a store on a lost volume is rebuilt from it (restore.py). A
changelog is compacted and has one partition per task, i.e. the input's partition count; the
partition of task ``S_P`` is ``P``. `ChangelogTopicSpec.requirement` is what the driver creates
and validates before any task opens its stores (driver/app_topics.py, with every other topic the
app writes, through kafka/topics.py); `ensure_changelog_topics` does the same for stores alone
(tests, bench, tools). A topic that exists with the wrong partition count or cleanup policy is an
error, never silently used: restoring a task from the wrong partition corrupts it
(docs/DESIGN.md, "Topics"). `restore_consumer_settings` is how a task reads its changelogs
(restore.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient

from eddy_contract.spec import TopicsSpec
from eddy_runtime.kafka.topics import TopicMismatch, TopicRequirement, ensure_topics
from eddy_runtime.state.store_spec import StoreSpec

__all__ = [
    "ChangelogTopicMismatch",
    "ChangelogTopicMissing",
    "ChangelogTopicSpec",
    "changelog_topic_name",
    "ensure_changelog_topics",
    "restore_consumer_settings",
    "topic_partition_count",
]

CHANGELOG_SUFFIX = "-changelog"
_WINDOW_CHANGELOG_EXTRA_RETENTION_MS = 24 * 3600 * 1000
_TIMEOUT_S = 30.0


def changelog_topic_name(app: str, store: str) -> str:
    """Kafka Streams' name for a store's changelog: ``<app>-<store>-changelog``."""
    return f"{app}-{store}{CHANGELOG_SUFFIX}"


#: An existing changelog topic does not match what the store needs (partitions, policy, replicas).
ChangelogTopicMismatch = TopicMismatch


class ChangelogTopicMissing(RuntimeError):
    """A changelog (or input) topic a task needs does not exist."""


@dataclass(frozen=True)
class ChangelogTopicSpec:
    """What one store's changelog topic must look like."""

    name: str
    partitions: int
    #: ``compact`` for key-value stores; ``compact,delete`` for window and session stores, whose
    #: old windows and sessions must also age out of the changelog (as Kafka Streams does).
    cleanup_policy: str = "compact"
    #: retention.ms for ``compact,delete`` topics; None leaves the broker default.
    retention_ms: int | None = None
    extra_config: tuple[tuple[str, str], ...] = ()

    @classmethod
    def for_store(cls, app: str, spec: StoreSpec, partitions: int) -> ChangelogTopicSpec:
        """The changelog a store needs: compacted; a window or session store's also deletes records
        older than its retention plus a day (Kafka Streams' windowstore.changelog.additional.retention.ms)."""
        name = changelog_topic_name(app, spec.name)
        if spec.kind in ("window", "session"):
            return cls(name, partitions, cleanup_policy="compact,delete",
                       retention_ms=int(spec.retention_ms or 0) + _WINDOW_CHANGELOG_EXTRA_RETENTION_MS)
        return cls(name, partitions)

    def config(self) -> dict[str, str]:
        cfg = {"cleanup.policy": self.cleanup_policy}
        if self.retention_ms is not None:
            cfg["retention.ms"] = str(self.retention_ms)
        cfg.update(dict(self.extra_config))
        return cfg

    def requirement(self) -> TopicRequirement:
        """The topic as `eddy_runtime.kafka.topics` creates and checks it: partitions and policy matter."""
        extra = {k: v for k, v in self.config().items() if k != "cleanup.policy"}
        return TopicRequirement(self.name, "changelog", self.partitions, check_partitions=True,
                                cleanup_policy=self.cleanup_policy, extra_config=tuple(extra.items()))


def topic_partition_count(admin: AdminClient, topic: str) -> int:
    """Partition count of an existing topic; `ChangelogTopicMissing` when it does not exist."""
    md = admin.list_topics(topic=topic, timeout=_TIMEOUT_S)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        raise ChangelogTopicMissing(f"topic {topic!r} does not exist")
    return len(t.partitions)


def ensure_changelog_topics(
    admin: AdminClient, specs: Iterable[ChangelogTopicSpec], *, settings: TopicsSpec | None = None,
    create: bool = True,
) -> dict[str, bool]:
    """Create missing changelog topics and validate existing ones (`eddy_runtime.kafka.topics`).

    `settings`: replication factor and min.insync.replicas (default: the brokers' defaults).
    Returns ``{topic: created}``. Raises `ChangelogTopicMismatch` naming the topic, what it has
    and what the store needs when an existing topic has another partition count or cleanup
    policy (or too few replicas), `TopicCreationFailed` when the brokers refuse to create one,
    and `ChangelogTopicMissing` when `create` is false and a topic is absent.
    """
    specs = list(specs)
    if not create:
        existing = admin.list_topics(timeout=_TIMEOUT_S).topics
        missing = [s.name for s in specs if s.name not in existing]
        if missing:
            raise ChangelogTopicMissing(f"changelog topics missing: {', '.join(missing)}")
    return ensure_topics(admin, [s.requirement() for s in specs], settings)


def restore_consumer_settings(app: str, task_id: str) -> dict[str, object]:
    """Consumer settings for restoring and tailing changelogs: read_committed, a short queue ahead
    (`kafka_client` adds bootstrap, spec.kafka.config and security).

    The group id is never used for commits (partitions are assigned, not subscribed); the
    client requires one.
    """
    conf: dict[str, object] = {
        "group.id": f"{app}-restore",
        "client.id": f"{app}-{task_id}-restore",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        # An offset out of range is reported, never silently reset: a restore from the wrong
        # place corrupts the store, so the reader decides (wipe and restore from scratch).
        "auto.offset.reset": "error",
        # A short queue ahead per reader (several restore at once; librdkafka's queue limits count
        # payload, not the overhead small records multiply: 16 MB fetches held 2.7 GB), refilled
        # 10 ms after it is found full, not 1 s: docs/DESIGN.md, "A runner's restores in bounded
        # memory".
        "fetch.max.bytes": 16 << 20,
        "max.partition.fetch.bytes": 512 << 10,
        "queued.min.messages": 50_000,
        "queued.max.messages.kbytes": 16 << 10,
        "fetch.queue.backoff.ms": 10,
        # A promoted standby's catch-up, a few records, took 0.07-0.11 s at a wait of 100 ms and
        # 0.01-0.04 s at 20 (bench/handover.py): it waited on a fetch held at the broker for up to
        # this wait (the one its last tail left in flight, or its own at the changelog's end; the
        # runners' logs do not tell which). Standbys are not assigned their partitions between
        # tails, so an idle one holds no fetch at the broker (no more fetches than at 100 ms before).
        "fetch.wait.max.ms": 20,
    }
    return conf
