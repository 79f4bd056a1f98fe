"""Windowed counts, stream-table joins, bad-record policies and shuffle rejection, on real Kafka and Spark."""

from __future__ import annotations

import json
import struct
import time

import pytest

from eddy_runtime.driver.outcomes import DriverError
from eddy_runtime.dsl.pipeline import PipelineError
from tests.runtime.apps import driver_for, produce, read_all, run_until_idle, streamapp

pytestmark = pytest.mark.integration

PIPELINES = "tests.runtime.pipelines"


def windowed(key: bytes) -> tuple[str, int]:
    return key[:-8].decode(), struct.unpack(">q", key[-8:])[0]


def test_a_tumbling_window_count_counts_per_window_and_drops_records_past_the_grace_period(kafka, spark, tmp_path):
    app = kafka.unique_name("win")
    clicks = kafka.create_topic(f"{app}-clicks", partitions=2)
    out = f"{app}-out"
    # One partition, in offset order; stream time is the task's (Kafka Streams'), not the key's. u2's
    # 9 s record is within window [0, 10 s) + 5 s grace of stream time 14 s; u1's 25 s record moves
    # stream time past it, so the 3 s record that follows is late and dropped.
    events = [("u2", 5_000), ("u2", 14_000), ("u2", 9_000),
              ("u1", 1_000), ("u1", 2_000), ("u1", 12_000), ("u1", 25_000), ("u1", 3_000), ("u1", 21_000)]
    # Recent timestamps (a minute ago, on a window boundary): the broker's retention would delete
    # records stamped in 1970 before the app reads them.
    base = int(time.time() * 1000) // 10_000 * 10_000 - 60_000
    produce(kafka.bootstrap, clicks, ((k.encode(), b"click") for k, _ in events), partition=0,
            timestamps=(base + t for _, t in events))
    spec = _with_function(streamapp(app, kafka.bootstrap, PIPELINES, {"input_topic": clicks, "output_topic": out},
                                    state={"standbyReplicas": 0}), "clicks_per_window")
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    run_until_idle(driver)
    latest = {(key, start - base): struct.unpack(">q", m.value())[0]
              for m in read_all(kafka.bootstrap, out) for key, start in [windowed(m.key())]}
    assert latest == {("u1", 0): 2, ("u1", 10_000): 1, ("u1", 20_000): 2, ("u2", 0): 2, ("u2", 10_000): 1}
    dropped = driver.metrics.registry.get_sample_value("eddy_driver_dropped_records_total", {"app": app})
    assert dropped == 1


def test_a_stream_table_join_sees_the_table_as_of_each_batch(kafka, spark, tmp_path):
    app = kafka.unique_name("join")
    clicks = kafka.create_topic(f"{app}-clicks", partitions=2)
    users = kafka.create_topic(f"{app}-users", partitions=2, config={"cleanup.policy": "compact"})
    out = f"{app}-out"
    spec = _with_function(streamapp(app, kafka.bootstrap, PIPELINES,
                                    {"clicks_topic": clicks, "users_topic": users, "output_topic": out}),
                          "clicks_with_city")
    produce(kafka.bootstrap, users, [(b"u1", b"paris"), (b"u2", b"rome"), (b"u3", b"oslo"), (b"u3", None)])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    produce(kafka.bootstrap, clicks, [(b"u1", b"c1"), (b"u2", b"c2"), (b"u3", b"c3"), (b"u9", b"c4")])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    produce(kafka.bootstrap, users, [(b"u1", b"lyon")])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    produce(kafka.bootstrap, clicks, [(b"u1", b"c5")])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    joined = sorted((m.key().decode(), json.loads(m.value())["value"], json.loads(m.value())["city"])
                    for m in read_all(kafka.bootstrap, out))
    assert joined == [("u1", "c1", "paris"), ("u1", "c5", "lyon"), ("u2", "c2", "rome"), ("u3", "c3", None),
                      ("u9", "c4", None)]


def _with_function(spec, function: str):
    from dataclasses import replace

    return replace(spec, pipeline=replace(spec.pipeline, function=function))


GOOD = [(b"a", b'{"n": "1"}'), (b"a", b'{"n": "2"}'), (b"b", b'{"n": "5"}')]
BAD_JSON = (b"a", b"{not json")
BAD_NUMBER = (b"poison", b'{"n": "x"}')


def _totals_app(kafka, policy: str):
    app = kafka.unique_name(f"bad-{policy}")
    source = kafka.create_topic(f"{app}-in", partitions=1)
    spec = _with_function(streamapp(app, kafka.bootstrap, PIPELINES, {"input_topic": source,
                                                                        "output_topic": f"{app}-out"},
                                    badRecordPolicy=policy, state={"standbyReplicas": 0}), "totals")
    return app, source, f"{app}-out", spec


def _totals(kafka, out: str) -> dict[str, int]:
    return {m.key().decode(): struct.unpack(">q", m.value())[0] for m in read_all(kafka.bootstrap, out)}


def test_bad_record_policy_fail_stops_at_the_record_and_names_its_offset(kafka, spark, tmp_path):
    _, source, out, spec = _totals_app(kafka, "fail")
    produce(kafka.bootstrap, source, GOOD)
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    produce(kafka.bootstrap, source, [BAD_JSON, (b"b", b'{"n": "1"}')])
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    with pytest.raises(DriverError, match=rf"{source}\[0\] offset 3: json serde"):
        reports = run_until_idle(driver)
        # Seen once in five CI runs (cause unknown): the app went idle without reading the bad
        # record. Say what each batch saw, for the next time.
        pytest.fail(f"idle without stopping; lag {driver.last_lag}; batches " + "; ".join(
            f"{r.batch_id} {r.outcome} in={r.records_in} {[(x.task, x.status, x.message[:80]) for x in r.results]}"
            for r in reports))
    assert _totals(kafka, out) == {"a": 3, "b": 5}  # nothing of the failed batch was committed


def test_bad_record_policy_skip_counts_and_leaves_out_bad_records(kafka, spark, tmp_path):
    app, source, out, spec = _totals_app(kafka, "skip")
    produce(kafka.bootstrap, source, [*GOOD, BAD_JSON, BAD_NUMBER, (b"b", b'{"n": "1"}')])
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    run_until_idle(driver)
    assert _totals(kafka, out) == {"a": 3, "b": 6}
    assert driver.metrics.registry.get_sample_value("eddy_driver_skipped_records_total", {"app": app}) == 2


def test_bad_record_policy_dead_letter_sends_the_records_with_the_error_in_headers(kafka, spark, tmp_path):
    app, source, out, spec = _totals_app(kafka, "dead-letter")
    produce(kafka.bootstrap, source, [*GOOD, BAD_JSON, BAD_NUMBER])
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    run_until_idle(driver)
    assert _totals(kafka, out) == {"a": 3, "b": 5}
    dead = read_all(kafka.bootstrap, f"{app}-dlq")
    got = {(m.key(), m.value()): dict(m.headers()) for m in dead}
    assert set(got) == {BAD_JSON, BAD_NUMBER}
    assert b"json serde" in got[BAD_JSON]["eddy.error"] and got[BAD_JSON]["eddy.source.offset"] == b"3"
    assert got[BAD_NUMBER]["eddy.error.stage"] == b"process" and b"ValueError" in got[BAD_NUMBER]["eddy.error"]
    assert driver.metrics.registry.get_sample_value("eddy_driver_dead_lettered_records_total", {"app": app}) == 2


def test_a_transform_that_shuffles_is_rejected_with_a_pointer_to_group_by(kafka, spark, tmp_path):
    app = kafka.unique_name("shuffle")
    source = kafka.create_topic(f"{app}-in")
    spec = _with_function(streamapp(app, kafka.bootstrap, PIPELINES, {"input_topic": source,
                                                                        "output_topic": f"{app}-out"}), "shuffles")
    with pytest.raises(PipelineError, match="group_by"):
        driver_for(spark, spec, str(tmp_path / "state")).prepare()


def _shout_app(kafka, policy: str):
    app = kafka.unique_name(f"udf-{policy}")
    source = kafka.create_topic(f"{app}-in", partitions=1)
    spec = _with_function(streamapp(app, kafka.bootstrap, PIPELINES, {"input_topic": source,
                                                                        "output_topic": f"{app}-out"},
                                    badRecordPolicy=policy), "shout")
    return app, source, f"{app}-out", spec


def test_a_record_that_makes_a_dataframe_step_fail_is_found_and_dead_lettered(kafka, spark, tmp_path):
    app, source, out, spec = _shout_app(kafka, "dead-letter")
    produce(kafka.bootstrap, source, [(b"1", b"a"), (b"2", b"boom"), (b"3", b"c")])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    assert sorted((m.key(), m.value()) for m in read_all(kafka.bootstrap, out)) == [(b"1", b"A"), (b"3", b"C")]
    (dead,) = read_all(kafka.bootstrap, f"{app}-dlq")
    assert (dead.key(), dead.value()) == (b"2", b"boom")
    headers = dict(dead.headers())
    assert b"cannot shout boom" in headers["eddy.error"] and headers["eddy.source.offset"] == b"1"


def test_policy_fail_stops_at_the_record_that_makes_a_dataframe_step_fail(kafka, spark, tmp_path):
    _, source, _, spec = _shout_app(kafka, "fail")
    produce(kafka.bootstrap, source, [(b"1", b"a"), (b"2", b"boom")])
    with pytest.raises(DriverError, match=rf"{source}\[0\] offset 1: .*cannot shout boom"):
        run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
