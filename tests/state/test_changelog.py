"""Changelog topic naming and the topic each kind of store needs."""

from __future__ import annotations

import pytest

from eddy_runtime.state import ChangelogTopicSpec, StoreSpec, changelog_topic_name

pytestmark = pytest.mark.unit


def test_changelog_topics_are_named_like_kafka_streams_ones() -> None:
    assert changelog_topic_name("wordcount", "counts") == "wordcount-counts-changelog"


def test_key_value_changelog_is_compacted_with_the_input_partition_count() -> None:
    spec = ChangelogTopicSpec.for_store("wc", StoreSpec.key_value("counts"), partitions=6)
    assert (spec.name, spec.partitions) == ("wc-counts-changelog", 6)
    assert spec.config() == {"cleanup.policy": "compact"}


def test_window_changelog_also_deletes_windows_past_retention_plus_a_day() -> None:
    spec = ChangelogTopicSpec.for_store("wc", StoreSpec.window("w", 1_000, 60_000), partitions=2)
    assert spec.config() == {"cleanup.policy": "compact,delete", "retention.ms": str(60_000 + 86_400_000)}


def test_session_changelog_also_deletes_sessions_past_retention_plus_a_day() -> None:
    spec = ChangelogTopicSpec.for_store("wc", StoreSpec.session("s", 60_000), partitions=2)
    assert spec.config() == {"cleanup.policy": "compact,delete", "retention.ms": str(60_000 + 86_400_000)}
