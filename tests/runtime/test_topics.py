"""Topics an app writes, against the real broker: created as spec.kafka.topics says, existing ones
validated, and every refusal raised with the topic's name (one broker here; three in
test_replicated_topics.py)."""

from __future__ import annotations

import pytest

from eddy_runtime.driver.app_topics import ensure_app_topics
from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.pipeline import Topology
from eddy_runtime.dsl.subtopology import CompiledApp
from eddy_runtime.kafka.topics import (
    TopicCreationFailed,
    TopicMismatch,
    describe_topics,
)
from tests.runtime.apps import streamapp

pytestmark = pytest.mark.integration


def word_count(kafka, topics: dict | None = None):
    """A compiled word count with a dead-letter topic, and its spec with `spec.kafka.topics`
    (nothing created yet)."""
    from examples.wordcount.app import build

    app = kafka.unique_name("tp")
    source = kafka.create_topic(f"{app}-lines", partitions=2)
    topology = Topology()
    build(topology, input_topic=source, output_topic=f"{app}-counts")
    compiled = compile_topology(topology, app, {source: 2})
    return compiled, streamapp(app, kafka.bootstrap, "examples.wordcount.app", badRecordPolicy="dead-letter",
                               kafka={"bootstrapServers": kafka.bootstrap, "topics": topics or {}})


def internal_topics(compiled: CompiledApp) -> list[str]:
    """The changelog, the repartition topic, the dead-letter topic and (exactly-once, continuous)
    the runners' fence topic."""
    return [f"{compiled.app}-counts-changelog", f"{compiled.app}-words-repartition", f"{compiled.app}-dlq",
            f"{compiled.app}-eddy-fences"]


def test_every_topic_is_created_with_the_brokers_default_replicas_and_the_configured_min_isr(kafka):
    compiled, spec = word_count(kafka, {"minInsyncReplicas": 1})
    out = f"{compiled.app}-counts"
    assert ensure_app_topics(kafka.admin, compiled, spec) == {t: True for t in [*internal_topics(compiled), out]}
    found = describe_topics(kafka.admin, [*internal_topics(compiled), out])
    changelog, repartition, dlq, fences = (found[t] for t in internal_topics(compiled))
    assert (changelog.partitions, changelog.cleanup_policy) == (2, "compact")
    assert (repartition.partitions, repartition.cleanup_policy) == (2, "delete")
    assert (fences.partitions, fences.cleanup_policy) == (1, "compact")
    assert dlq.partitions == 1 and found[out].partitions == 2
    # -1 -> the test broker's default.replication.factor (1)
    assert {d.replication_factor for d in found.values()} == {1}
    assert {d.min_insync_replicas for d in found.values()} == {1}
    # a second start finds them all and is content
    assert ensure_app_topics(kafka.admin, compiled, spec) == {t: False for t in [*internal_topics(compiled), out]}


def test_a_changelog_with_the_wrong_partitions_or_policy_stops_the_app_naming_it(kafka):
    compiled, spec = word_count(kafka)
    kafka.create_topic(f"{compiled.app}-counts-changelog", partitions=3)  # delete policy, 3 partitions
    with pytest.raises(TopicMismatch) as err:
        ensure_app_topics(kafka.admin, compiled, spec)
    message = str(err.value)
    assert f"changelog topic '{compiled.app}-counts-changelog' has 3 partitions, the app needs 2" in message
    assert (f"changelog topic '{compiled.app}-counts-changelog' has cleanup.policy=delete, "
            "the app needs cleanup.policy=compact") in message


def test_a_compacted_repartition_topic_is_rejected(kafka):
    compiled, spec = word_count(kafka)
    kafka.create_topic(f"{compiled.app}-words-repartition", partitions=2, config={"cleanup.policy": "compact"})
    with pytest.raises(TopicMismatch, match=f"repartition topic '{compiled.app}-words-repartition' has "
                                            "cleanup.policy=compact, the app needs cleanup.policy=delete"):
        ensure_app_topics(kafka.admin, compiled, spec)


def test_an_existing_internal_topic_with_fewer_replicas_than_configured_is_rejected(kafka):
    compiled, spec = word_count(kafka, {"replicationFactor": 2})
    kafka.create_topic(f"{compiled.app}-counts-changelog", partitions=2, config={"cleanup.policy": "compact"})
    kafka.create_topic(f"{compiled.app}-words-repartition", partitions=2)
    kafka.create_topic(f"{compiled.app}-dlq")
    kafka.create_topic(f"{compiled.app}-eddy-fences", config={"cleanup.policy": "compact"})
    kafka.create_topic(f"{compiled.app}-counts", partitions=2)  # the user's output: not held to it
    with pytest.raises(TopicMismatch) as err:
        ensure_app_topics(kafka.admin, compiled, spec)
    message = str(err.value)
    for topic in internal_topics(compiled):
        assert f"topic '{topic}' has replication factor 1, spec.kafka.topics.replicationFactor asks for at " \
               "least 2" in message
    assert f"{compiled.app}-counts'" not in message


def test_more_replicas_than_brokers_fails_the_creation_naming_each_topic_and_the_reason(kafka):
    compiled, spec = word_count(kafka, {"replicationFactor": 3, "minInsyncReplicas": 2})
    with pytest.raises(TopicCreationFailed) as err:
        ensure_app_topics(kafka.admin, compiled, spec)
    message = str(err.value)
    for topic in [*internal_topics(compiled), f"{compiled.app}-counts"]:
        assert f"topic '{topic}'" in message
    assert "replication factor 3" in message and "INVALID_REPLICATION_FACTOR" in message
    assert "spec.kafka.topics.replicationFactor must be at most the number of brokers" in message
    assert not set(internal_topics(compiled)) & set(kafka.admin.list_topics(timeout=10).topics)


def test_a_min_isr_above_the_replicas_the_brokers_gave_is_refused_before_any_write(kafka):
    compiled, spec = word_count(kafka, {"minInsyncReplicas": 2})
    with pytest.raises(TopicMismatch, match="has min.insync.replicas=2 but only 1 replica"):
        ensure_app_topics(kafka.admin, compiled, spec)

