"""The pipeline API and its compiler: sub-topologies, topics, stores and tasks (pure, no servers)."""

from __future__ import annotations

import pytest

from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.pipeline import PipelineError, Topology, duration_ms, hopping, tumbling
from eddy_runtime.dsl.subtopology import RepartitionSink, TopicSink

pytestmark = pytest.mark.unit


def identity(df):
    return df


def wordcount(t: Topology) -> None:
    t.stream("lines").transform(identity).group_by("word", name="words").count(name="counts").to("counts-out")


def test_group_by_ends_a_sub_topology_at_a_repartition_topic():
    t = Topology()
    wordcount(t)
    app = compile_topology(t, "wc", {"lines": 3})
    first, second = app.subtopologies
    assert first.source.topic == "lines" and first.uses_dataframe and first.stateful is None
    assert first.sinks == (RepartitionSink("wc-words-repartition", "word", "string", 1, "count", None),)
    assert second.source.topic == "wc-words-repartition" and second.source.repartition
    assert second.stateful is not None and second.stateful.kind == "count"
    assert second.sinks == (TopicSink("counts-out", "string", "int64", "key", "value"),)
    assert app.repartition_topics == {"wc-words-repartition": 3}
    assert app.tasks == ("0_0", "0_1", "0_2", "1_0", "1_1", "1_2")
    assert app.stateful_tasks() == ("1_0", "1_1", "1_2")
    assert [(c.name, c.partitions, c.cleanup_policy) for c in app.changelog_topics()] == [
        ("wc-counts-changelog", 3, "compact")
    ]


def test_the_executor_part_of_a_sub_topology_carries_no_dataframe_steps():
    t = Topology()
    wordcount(t)
    first = compile_topology(t, "wc", {"lines": 1}).subtopologies[0]
    assert first.steps == (identity,)
    assert first.for_executor().steps == () and first.for_executor().uses_dataframe


def test_a_general_aggregate_sends_rows_not_partial_results_through_the_repartition():
    t = Topology()
    t.stream("in").group_by("k").aggregate(lambda: 0, lambda k, v, a: a).to("out")
    first, second = compile_topology(t, "a", {"in": 2}).subtopologies
    assert first.sinks[0].combine is None and second.source.combined is None


def test_windowed_counts_use_window_stores_with_compact_and_delete_changelogs():
    t = Topology()
    t.stream("clicks").group_by_key().windowed_by(tumbling("1m", grace="10s")).count(name="per-minute").to("out")
    (sub,) = compile_topology(t, "w", {"clicks": 2}).subtopologies
    store = sub.stateful.store
    assert (store.kind, store.window_size_ms, store.retention_ms) == ("window", 60_000, 70_000)
    assert sub.sinks[0].windowed
    (changelog,) = compile_topology(t, "w", {"clicks": 2}).changelog_topics()
    assert changelog.cleanup_policy == "compact,delete"


def test_a_stream_table_join_materializes_the_table_in_the_streams_sub_topology():
    t = Topology()
    users = t.table("users", name="users")
    t.stream("clicks").join(users, how="left").to("enriched", value=["value", "table_value"], value_serde="json")
    (sub,) = compile_topology(t, "j", {"clicks": 4, "users": 4}).subtopologies
    assert sub.input_topics == ("clicks", "users")
    assert sub.table.store.name == "users" and sub.stateful.how == "left"


def test_a_joiner_given_to_a_stream_table_join_reaches_the_join_not_ignored():
    """A joiner there used to be dropped without a word, so the records went on without what it
    would have made (found by the fault campaign's first app, bench/chaos.py); it was refused
    since, and is Kafka Streams' ValueJoiner now (test_operators.py runs it)."""
    def joiner(click, user):
        return f"{click}/{user}"

    t = Topology()
    t.stream("clicks").join(t.table("users"), joiner).to("out")
    (sub,) = compile_topology(t, "j", {"clicks": 4, "users": 4}).subtopologies
    assert sub.stateful.kind == "join" and sub.stateful.joiner is joiner
    with pytest.raises(PipelineError, match="joiner is a function"):
        t.stream("views").join(t.table("users2"), "value")


def test_a_join_with_a_table_partitioned_differently_is_rejected():
    t = Topology()
    t.stream("clicks").join(t.table("users")).to("out")
    with pytest.raises(PipelineError, match="co-partitioned"):
        compile_topology(t, "j", {"clicks": 4, "users": 2})


def test_transform_after_an_aggregation_is_rejected_with_what_to_do_instead():
    t = Topology()
    counts = t.stream("in").group_by("k").count()
    with pytest.raises(PipelineError, match="write the result to a topic"):
        counts.to_stream().transform(identity)


def test_a_pipeline_that_writes_nothing_is_rejected():
    t = Topology()
    t.stream("in").transform(identity)
    with pytest.raises(PipelineError, match="writes nothing"):
        compile_topology(t, "x", {"in": 1})


def test_a_missing_input_topic_is_named():
    t = Topology()
    t.stream("nope").to("out")
    with pytest.raises(PipelineError, match="'nope' does not exist"):
        compile_topology(t, "x", {})


def test_store_and_repartition_names_are_unique():
    t = Topology()
    s = t.stream("in")
    s.group_by("a", name="same").count()
    with pytest.raises(PipelineError, match="used twice"):
        s.group_by("b", name="same")


def test_two_chains_from_one_stream_are_rejected():
    t = Topology()
    s = t.stream("in")
    s.transform(identity).to("a")
    s.transform(identity).to("b")
    with pytest.raises(PipelineError, match="several chains"):
        compile_topology(t, "x", {"in": 1})


def test_durations_accept_milliseconds_timedeltas_and_unit_strings():
    from datetime import timedelta

    assert duration_ms(500) == 500
    assert duration_ms("2s") == 2000
    assert duration_ms("1.5m") == 90_000
    assert duration_ms(timedelta(hours=1)) == 3_600_000
    with pytest.raises(PipelineError):
        duration_ms("soon")


def test_hopping_windows_check_their_advance_and_retention():
    w = hopping("10s", "5s", grace="1s")
    assert (w.size_ms, w.advance_ms, w.grace_ms, w.retention_ms) == (10_000, 5_000, 1_000, 11_000)
    with pytest.raises(PipelineError, match="advance"):
        hopping("10s", "20s")
    with pytest.raises(PipelineError, match="retention"):
        tumbling("10s", grace="5s", retention="12s")


def test_a_topic_read_by_two_streams_is_rejected():
    t = Topology()
    t.stream("in").to("a")
    t.stream("in").to("b")
    with pytest.raises(PipelineError, match="topic 'in' is read by two stream"):
        compile_topology(t, "app", {"in": 1})


def test_two_streams_merge_through_one_internal_topic_into_one_sub_topology():
    t = Topology()
    clicks = t.stream("clicks").map_values(str.lower)
    views = t.stream("views")
    clicks.merge(views, name="events").group_by_key().count(name="per-user").to("out")
    app = compile_topology(t, "app", {"clicks": 2, "views": 2})
    first, second, merged = app.subtopologies
    topic = "app-events-repartition"
    assert [k.topic for k in first.sinks] == [topic] and [k.topic for k in second.sinks] == [topic]
    assert first.sinks[0].target == second.sinks[0].target == 2
    assert merged.source.topic == topic and merged.source.repartition and merged.stateful.kind == "count"
    assert app.repartition_topics == {topic: 2}


def test_two_topics_merged_as_read_are_one_sub_topology_reading_both():
    t = Topology()
    t.stream("clicks").merge(t.stream("views"), name="events").map_values(str.lower).group_by_key() \
        .count(name="per-user").to("out")
    app = compile_topology(t, "app", {"clicks": 2, "views": 2})
    (merged,) = app.subtopologies
    assert merged.source.topics == ("clicks", "views") and not merged.source.repartition
    assert merged.input_topics == ("clicks", "views") and merged.stateful.kind == "count"
    assert app.repartition_topics == {} and app.tasks == ("0_0", "0_1")


@pytest.mark.parametrize("case", ["views read twice", "other partitions", "other serdes", "transform after",
                                  "in_place=False"])
def test_a_merge_that_cannot_be_read_in_place_goes_through_its_topic(case):
    t = Topology()
    clicks = t.stream("clicks")
    views = t.stream("views", key_serde="int64" if case == "other serdes" else "string")
    merged = clicks.merge(views, name="events", in_place=case != "in_place=False")
    if case == "views read twice":
        views.to("views-copy")
    if case == "transform after":
        merged = merged.transform(identity)
    merged.to("out")
    app = compile_topology(t, "app", {"clicks": 2, "views": 3 if case == "other partitions" else 2})
    assert "app-events-repartition" in app.repartition_topics
    assert all(s.source.merged == () for s in app.subtopologies)
