"""The fault campaign's schedule and figures (bench/chaos_report.py): the same seed gives the same
schedule with every kind equally often; a fault's recovery ends when records are on time again,
not at the first lucky record; each fault's largest lateness counts the events in flight when it
struck; the report's JSON stays valid with events never seen."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from bench.chaos import coordinator_partition, java_hash
from bench.chaos_report import KINDS, Fault, Report, Sample, analyse, per_kind, plan, plot, recovery

pytestmark = pytest.mark.unit


def test_the_same_seed_gives_the_same_schedule_and_every_kind_equally_often() -> None:
    first = plan(7, 56)
    assert first == plan(7, 56) and first != plan(8, 56)
    assert Counter(p.kind for p in first) == {k: 8 for k in KINDS}
    roles = [p.role for p in first if p.kind == "broker-killed"]
    assert roles[:4] == ["controller", "group-coordinator", "transaction-coordinator", "any"]
    assert all(p.down_s > 0 for p in first if p.kind in ("broker-killed", "node-lost", "executor-cut-off"))


def test_a_schedule_of_fewer_faults_than_kinds_draws_distinct_kinds() -> None:
    few = plan(3, 5)
    assert len({p.kind for p in few}) == 5


def flow(late: dict[int, float], seconds: int = 60, per_second: int = 10) -> list[Sample]:
    """Events every 0.1 s; those sent in the seconds of `late` that late, the rest 0.1 s."""
    return [Sample(t + i / per_second, late.get(t, 0.1)) for t in range(seconds) for i in range(per_second)]


def test_recovery_ends_at_the_first_of_three_seconds_on_time_after_the_fault() -> None:
    samples = flow({20: 5.0, 21: 4.0, 22: 3.0, 23: 0.1, 24: 2.0, 25: 0.1, 26: 0.1, 27: 0.1})
    faults = [Fault("executor-killed", "pod", 20.5, 20.5)]
    analyse(faults, samples, threshold=0.2, end=60)
    # seconds 20-22 late, 23 on time but 24 late again: on time for good from 25
    assert faults[0].recovery_s == pytest.approx(4.5)
    assert faults[0].largest_lateness_s == 5.0


def test_a_fault_that_delays_nothing_recovers_at_once_and_one_never_over_is_none() -> None:
    samples = flow({})
    by_second = {t: [0.1] * 10 for t in range(60)}
    assert recovery(by_second, 30.2, 0.2, 59) == 0.0
    late_for_good = flow({t: 9.0 for t in range(30, 60)})
    faults = [Fault("broker-killed", "broker 1", 30.0, 40.0)]
    analyse(faults, late_for_good, threshold=0.2, end=60)
    assert faults[0].recovery_s is None
    assert per_kind(faults)[0].not_recovered == 1
    assert samples  # the first flow is on time throughout


def test_events_in_flight_when_a_fault_struck_count_in_its_largest_lateness() -> None:
    samples = [*flow({}), Sample(29.5, 7.0)]  # sent half a second before the fault
    faults = [Fault("driver-pod-deleted", "driver", 30.0, 30.0), Fault("node-lost", "n3", 45.0, 80.0)]
    analyse(faults, samples, threshold=0.2, end=60)
    assert faults[0].largest_lateness_s == 7.0 and faults[1].largest_lateness_s == pytest.approx(0.1)


def test_an_event_sent_just_before_a_fault_and_held_up_by_it_counts_for_that_fault_only() -> None:
    # the driver's restart is over (on time again from 33 s); 2.5 s before the node is lost, an
    # event is sent that comes out only once the node's loss is over, 100 s later
    samples = [*flow({30: 3.0, 31: 2.0, 32: 1.0}, seconds=200), Sample(97.5, 100.0)]
    faults = [Fault("driver-pod-deleted", "driver", 30.0, 30.0), Fault("node-lost", "n3", 100.0, 130.0)]
    analyse(faults, samples, threshold=0.2, end=200)
    assert faults[0].largest_lateness_s == 3.0 and faults[1].largest_lateness_s == 100.0


def test_the_report_s_json_and_text_hold_events_never_seen(tmp_path: Path) -> None:
    samples = [*flow({}), Sample(40.0, math.inf)]
    faults = [Fault("executor-cut-off", "pod", 39.0, 49.0, executor_pods=[])]
    analyse(faults, samples, threshold=0.2, end=60)
    report = Report(seed=1, command="x", duration_s=60, rate=10, steady_p50_s=0.1, steady_p99_s=0.2, faults=faults,
                    verdict={"ok": True}, verdict_text="PASS")
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["faults"][0]["largest_lateness_s"] == "inf"
    assert "executor-cut-off" in report.text() and "never" in report.text()
    plot(tmp_path / "p.png", samples, [(float(t), 3) for t in range(60)], faults, 0.2, "t")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_coordinators_are_found_as_kafka_partitions_them() -> None:
    assert java_hash("hello") == 99162322  # "hello".hashCode() in Java
    assert java_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE: abs() must mask, not negate
    assert coordinator_partition("polygenelubricants", 4) == 0
    assert {coordinator_partition(f"app-runner-10.244.0.{i}", 4) for i in range(20)} == {0, 1, 2, 3}
