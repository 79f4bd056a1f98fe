"""What each topic an app writes must look like, and what an existing one may not get wrong (pure)."""

from __future__ import annotations

import pytest

from eddy_contract.spec import TopicsSpec
from eddy_runtime.driver.app_topics import app_topic_requirements
from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.pipeline import Topology
from eddy_runtime.kafka.topics import TopicDescription, TopicRequirement, topic_problems
from tests.runtime.apps import streamapp

pytestmark = pytest.mark.unit

CHANGELOG = TopicRequirement("wc-counts-changelog", "changelog", 4, check_partitions=True, cleanup_policy="compact")
OUTPUT = TopicRequirement("wc-out", "output", 4, internal=False)


def found(name: str = "wc-counts-changelog", partitions: int = 4, rf: int = 3, policy: str = "compact",
          min_isr: int = 2) -> TopicDescription:
    return TopicDescription(name, partitions, rf, policy, min_isr)


def test_a_topic_that_matches_has_no_problem() -> None:
    assert topic_problems(CHANGELOG, found(), TopicsSpec(3, 2)) == []
    assert topic_problems(CHANGELOG, found(rf=1, min_isr=1), TopicsSpec()) == []


def test_a_changelog_with_other_partitions_names_the_topic_the_count_found_and_needed() -> None:
    [problem] = topic_problems(CHANGELOG, found(partitions=6), TopicsSpec())
    assert "changelog topic 'wc-counts-changelog' has 6 partitions, the app needs 4" in problem


def test_a_changelog_that_deletes_instead_of_compacting_is_rejected() -> None:
    [problem] = topic_problems(CHANGELOG, found(policy="delete"), TopicsSpec())
    assert "cleanup.policy=delete, the app needs cleanup.policy=compact" in problem
    window = TopicRequirement("w", "changelog", 4, check_partitions=True, cleanup_policy="compact,delete")
    assert topic_problems(window, found("w", policy="delete, compact"), TopicsSpec()) == []
    assert "needs cleanup.policy=compact,delete" in topic_problems(window, found("w"), TopicsSpec())[0]


def test_fewer_replicas_than_configured_are_rejected_more_are_fine() -> None:
    [problem] = topic_problems(CHANGELOG, found(rf=1, min_isr=1), TopicsSpec(replication_factor=3))
    assert "has replication factor 1, spec.kafka.topics.replicationFactor asks for at least 3" in problem
    assert topic_problems(CHANGELOG, found(rf=5), TopicsSpec(replication_factor=3)) == []
    # -1: whatever the brokers' default made is accepted
    assert topic_problems(CHANGELOG, found(rf=1, min_isr=1), TopicsSpec(replication_factor=-1)) == []


def test_a_lower_min_insync_replicas_than_configured_is_rejected() -> None:
    [problem] = topic_problems(CHANGELOG, found(min_isr=1), TopicsSpec(3, 2))
    assert "min.insync.replicas=1, spec.kafka.topics.minInsyncReplicas asks for at least 2" in problem


def test_more_min_insync_replicas_than_replicas_is_rejected_for_any_topic_written() -> None:
    [problem] = topic_problems(OUTPUT, found("wc-out", rf=1, min_isr=2), TopicsSpec())
    assert "output topic 'wc-out' has min.insync.replicas=2 but only 1 replica(s)" in problem


def test_a_users_output_topic_is_not_held_to_the_internal_topic_settings() -> None:
    assert topic_problems(OUTPUT, found("wc-out", partitions=1, rf=1, policy="compact", min_isr=1),
                          TopicsSpec(3, 2)) == []


def test_every_topic_of_word_count_is_required_with_its_role_partitions_and_policy() -> None:
    from examples.wordcount.app import build

    topology = Topology()
    build(topology, input_topic="lines", output_topic="counts-out")
    compiled = compile_topology(topology, "wc", {"lines": 4})
    spec = streamapp("wc", "127.0.0.1:1", "examples.wordcount.app", badRecordPolicy="dead-letter")
    reqs = {r.name: r for r in app_topic_requirements(compiled, spec)}
    assert reqs == {
        "wc-counts-changelog": CHANGELOG,
        "wc-words-repartition": TopicRequirement("wc-words-repartition", "repartition", 4, check_partitions=True,
                                                 cleanup_policy="delete"),
        "wc-dlq": TopicRequirement("wc-dlq", "dead-letter", 1),
        "counts-out": TopicRequirement("counts-out", "output", 4, internal=False),
        # exactly-once on the continuous path: the runners' fence epochs (protocol/fences.py)
        "wc-eddy-fences": TopicRequirement("wc-eddy-fences", "fences", 1, check_partitions=True,
                                           cleanup_policy="compact"),
    }
    assert "counts-out" not in {r.name for r in app_topic_requirements(compiled, spec, create_outputs=False)}


def test_created_topics_carry_min_insync_replicas_only_when_configured() -> None:
    assert CHANGELOG.create_config(TopicsSpec()) == {"cleanup.policy": "compact"}
    assert CHANGELOG.create_config(TopicsSpec(3, 2)) == {"cleanup.policy": "compact", "min.insync.replicas": "2"}
    assert OUTPUT.create_config(TopicsSpec(3, 2)) == {"min.insync.replicas": "2"}
