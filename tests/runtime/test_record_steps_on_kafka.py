"""Eddy's own record steps through the driver on real Kafka and Spark: the word count written with
flat_map_values, and a raising function under each bad-record policy."""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from eddy_runtime.driver.outcomes import DriverError
from eddy_runtime.dsl.pipeline import PipelineError
from examples.wordcount.app import split_words
from tests.runtime.apps import driver_for, latest_counts, produce, read_all, run_until_idle, streamapp

pytestmark = pytest.mark.integration

PIPELINES = "tests.runtime.record_step_pipelines"
SAMPLE = Path(__file__).parents[2] / "examples" / "wordcount" / "sample.txt"


def with_function(spec, function: str):
    return replace(spec, pipeline=replace(spec.pipeline, function=function))


def test_the_word_count_of_record_steps_counts_exactly_what_the_dataframe_word_count_counts(kafka, spark, tmp_path):
    lines = SAMPLE.read_text().splitlines() * 3
    now = datetime.now(UTC)
    words = spark.createDataFrame([(line, now) for line in lines], "value string, timestamp timestamp")
    expected = Counter(r.word for r in split_words(words).collect())
    app = kafka.unique_name("wc-own")
    source = kafka.create_topic(f"{app}-lines", partitions=2)
    out = f"{app}-counts"
    produce(kafka.bootstrap, source, ((None, line.encode()) for line in lines))
    spec = with_function(streamapp(app, kafka.bootstrap, "examples.wordcount.app",
                                   {"input_topic": source, "output_topic": out}, processingGuarantee="exactly_once",
                                   state={"standbyReplicas": 0}), "build_own_steps")
    reports = run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    assert all(r.outcome == "ok" for r in reports), [(r.batch_id, r.outcome, r.error) for r in reports]
    assert latest_counts(kafka.bootstrap, out) == expected
    assert expected["the"] > 30  # the sample is read: a count that matches nothing proves nothing


GOOD = [(b"a", b"1,2"), (b"b", b"5")]
BAD = (b"a", b"3,x")


def _totals_app(kafka, policy: str):
    app = kafka.unique_name(f"own-{policy}")
    source = kafka.create_topic(f"{app}-in", partitions=1)
    spec = with_function(streamapp(app, kafka.bootstrap, PIPELINES, {"input_topic": source,
                                                                       "output_topic": f"{app}-out"},
                                   badRecordPolicy=policy, state={"standbyReplicas": 0}), "totals")
    return app, source, f"{app}-out", spec


def _totals(kafka, out: str) -> dict[str, int]:
    return {m.key().decode(): struct.unpack(">q", m.value())[0] for m in read_all(kafka.bootstrap, out)}


def test_a_raising_record_step_under_policy_skip_leaves_its_record_out_and_counts_the_rest(kafka, spark, tmp_path):
    app, source, out, spec = _totals_app(kafka, "skip")
    produce(kafka.bootstrap, source, [*GOOD, BAD, (b"b", b"1")])
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    run_until_idle(driver)
    assert _totals(kafka, out) == {"a": 3, "b": 6}  # none of "3,x" counts, not even its 3
    assert driver.metrics.registry.get_sample_value("eddy_driver_skipped_records_total", {"app": app}) == 1


def test_a_raising_record_step_under_policy_dead_letter_sends_its_record_with_the_error(kafka, spark, tmp_path):
    app, source, out, spec = _totals_app(kafka, "dead-letter")
    produce(kafka.bootstrap, source, [*GOOD, BAD])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    assert _totals(kafka, out) == {"a": 3, "b": 5}
    (dead,) = read_all(kafka.bootstrap, f"{app}-dlq")
    assert (dead.key(), dead.value()) == BAD
    headers = dict(dead.headers())
    assert headers["eddy.error"].startswith(b"flat_map_values(numbers) failed: ValueError: invalid literal")
    assert headers["eddy.error.stage"] == b"process" and headers["eddy.source.offset"] == b"2"


def test_a_raising_record_step_under_policy_fail_stops_at_its_offset_and_commits_nothing(kafka, spark, tmp_path):
    _, source, out, spec = _totals_app(kafka, "fail")
    produce(kafka.bootstrap, source, GOOD)
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    produce(kafka.bootstrap, source, [(b"b", b"1"), BAD])
    with pytest.raises(DriverError, match=rf"{source}\[0\] offset 3: flat_map_values\(numbers\) failed: ValueError"):
        run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    assert _totals(kafka, out) == {"a": 3, "b": 5}  # nothing of the failed batch was committed


def test_a_stateless_sub_topology_of_record_steps_dead_letters_the_record_its_function_fails_on(kafka, spark,
                                                                                                 tmp_path):
    app = kafka.unique_name("own-shout")
    source = kafka.create_topic(f"{app}-in", partitions=1)
    out = f"{app}-out"
    spec = with_function(streamapp(app, kafka.bootstrap, PIPELINES, {"input_topic": source, "output_topic": out},
                                   badRecordPolicy="dead-letter"), "shouted")
    produce(kafka.bootstrap, source, [(b"1", b"a"), (b"2", b""), (b"3", b"boom"), (b"4", b"c")])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    got = sorted((m.key(), m.value(), m.timestamp()[1]) for m in read_all(kafka.bootstrap, out))
    assert [(k, v) for k, v, _ in got] == [(b"1", b"A"), (b"4", b"C")]
    (dead,) = read_all(kafka.bootstrap, f"{app}-dlq")
    assert (dead.key(), dead.value()) == (b"3", b"boom")
    assert b"map_values(shout) failed: ValueError: cannot shout boom" in dict(dead.headers())["eddy.error"]


def test_a_record_step_after_a_transform_is_rejected_when_the_app_starts(kafka, spark, tmp_path):
    app = kafka.unique_name("own-mixed")
    source = kafka.create_topic(f"{app}-in")
    spec = with_function(streamapp(app, kafka.bootstrap, PIPELINES, {"input_topic": source,
                                                                       "output_topic": f"{app}-out"}), "mixed")
    with pytest.raises(PipelineError, match=r"map_values\(shout\) and transform in one sub-topology"):
        driver_for(spark, spec, str(tmp_path / "state")).prepare()


def test_group_by_a_pyspark_column_is_a_dataframe_step_not_a_key_selector(spark):
    from pyspark.sql import functions as F

    from eddy_runtime.dsl.compiler import compile_topology
    from eddy_runtime.dsl.pipeline import Topology

    t = Topology()
    t.stream("in").group_by(F.upper("value")).count().to("out")
    assert compile_topology(t, "app", {"in": 1}).subtopologies[0].uses_dataframe
    t = Topology()
    t.stream("in").map_values(str.lower).group_by(F.upper("value")).count().to("out")
    with pytest.raises(PipelineError, match=r"group_by\(pyspark Column\) needs Spark after record steps"):
        compile_topology(t, "app", {"in": 1})



def _pipeline_app(kafka, name: str, function: str, **spec):
    """(app, input topic, output topic, spec) of one of record_step_pipelines' functions."""
    app = kafka.unique_name(name)
    source = kafka.create_topic(f"{app}-in", partitions=2)
    out = f"{app}-out"
    spec = with_function(streamapp(app, kafka.bootstrap, PIPELINES, {"input_topic": source, "output_topic": out},
                                   state={"standbyReplicas": 0}, **spec), function)
    return app, source, out, spec


@pytest.mark.parametrize("execution", ["continuous", "microBatch"])
def test_record_steps_after_a_stateful_step_run_on_its_results(kafka, spark, tmp_path, execution):
    app, source, out, spec = _pipeline_app(kafka, f"post-{execution.lower()}", "labelled_totals", execution=execution)
    produce(kafka.bootstrap, source, [(b"a", b"1,2"), (b"hidden", b"7"), (b"b", b"5"), (b"a", b"4")])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    last = {m.key().decode(): m.value().decode() for m in read_all(kafka.bootstrap, out)}
    assert last == {"a": "7 in total", "b": "5 in total"}


def test_a_count_re_keyed_by_a_function_goes_through_a_repartition_and_is_counted(kafka, spark, tmp_path):
    app, source, out, spec = _pipeline_app(kafka, "post-rekey", "sized_counts")
    # one batch: every key's count is final when it is re-keyed (a: 3 numbers, b: 1, c: 1)
    produce(kafka.bootstrap, source, [(b"a", b"1,2,3"), (b"b", b"5"), (b"c", b"6")])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    sizes = {m.key().decode(): struct.unpack(">q", m.value())[0] for m in read_all(kafka.bootstrap, out)}
    assert sizes == {"many": 1, "one": 2}


@pytest.mark.parametrize("execution", ["continuous", "microBatch"])
def test_split_routes_each_record_to_its_first_branch_in_one_sub_topology(kafka, spark, tmp_path, execution):
    app, source, out, spec = _pipeline_app(kafka, f"split-{execution.lower()}", "routed", execution=execution)
    sent = [(b"a", b"hello"), (b"b", b"!fire"), (b"a", b""), (b"c", b"world"), (b"b", b"!flood")]
    produce(kafka.bootstrap, source, sent)
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    run_until_idle(driver)
    assert len(driver.compiled.subtopologies) == 1  # the branches share one read of the input

    def values(topic):
        return sorted(m.value().decode() for m in read_all(kafka.bootstrap, topic))

    assert values(f"{out}-alerts") == ["!FIRE", "!FLOOD"]
    assert values(out) == ["hello", "world"]
    assert values(f"{out}-raw") == sorted(v.decode() for _, v in sent)


def _merge_app(kafka, name: str, function: str, **spec):
    """An app of `function` over two topics of 2 partitions, `<app>-in` (a few numbers in it) and
    `<app>-in-more` (empty: each test writes its own)."""
    app = kafka.unique_name(name)
    source = kafka.create_topic(f"{app}-in", partitions=2)
    more = kafka.create_topic(f"{app}-in-more", partitions=2)
    out = f"{app}-out"
    app_spec = with_function(streamapp(app, kafka.bootstrap, PIPELINES, {"input_topic": source, "output_topic": out},
                                       state={"standbyReplicas": 0}, **spec), function)
    produce(kafka.bootstrap, source, [(b"a", b"1,2"), (b"b", b"3")])
    return app, source, more, out, app_spec


def test_two_merged_streams_are_counted_together(kafka, spark, tmp_path):
    _, _, more, out, spec = _merge_app(kafka, "merge", "merged_counts")
    produce(kafka.bootstrap, more, [(b"a", b"4"), (b"c", b"5,6,7")])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    assert _totals(kafka, out) == {"a": 3, "b": 1, "c": 3}


def test_two_topics_merged_as_read_are_counted_by_one_task_and_a_bad_record_names_its_topic(kafka, spark, tmp_path):
    app, source, more, out, spec = _merge_app(kafka, "merge-in-place", "merged_in_place_counts",
                                              badRecordPolicy="dead-letter")
    produce(kafka.bootstrap, more, [(b"a", b"4"), (b"c", b"5,6,7"), (b"c", b"x")])
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    run_until_idle(driver)
    assert [s.input_topics for s in driver.compiled.subtopologies] == [(source, more)]
    assert _totals(kafka, out) == {"a": 3, "b": 1, "c": 3}
    (dead,) = read_all(kafka.bootstrap, f"{app}-dlq")
    assert (dead.key(), dead.value()) == (b"c", b"x")
    assert dict(dead.headers())["eddy.source.topic"] == more.encode()
