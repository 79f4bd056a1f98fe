"""The autoscaler's model (eddy_operator.autoscaler): rates from two runtime states, the executors
they need, and decisions held back by the stabilization windows and the step."""

from __future__ import annotations

import pytest

from eddy_contract.autoscaling import AutoscalingSpec
from eddy_operator.autoscaler import OBSERVED_KEEP_S, History, Rates, Sample, decide, rates, recommend

pytestmark = pytest.mark.unit

SETTINGS = AutoscalingSpec(enabled=True, min_replicas=1, max_replicas=8, target_utilization=50, catch_up_s=100,
                           window_s=60, scale_out_stabilization_s=30, scale_in_stabilization_s=120, max_step=2)


def _sample(at: float, records: dict[str, int], busy: dict[str, float], backlog: int, since: str = "d1") -> Sample:
    return Sample(at, since, records, busy, backlog)


def test_rates_are_taken_over_the_window_from_the_same_counters() -> None:
    samples = [
        _sample(0, {"1": 0, "2": 0}, {"1": 0.0, "2": 0.0}, 1000, since="old"),
        _sample(10, {"1": 100, "2": 100}, {"1": 1.0, "2": 1.0}, 1000),
        _sample(70, {"1": 6100, "2": 6100}, {"1": 31.0, "2": 31.0}, 4000),
    ]
    r = rates(samples, window_s=60)
    assert r is not None
    assert r.window_s == 60 and r.executors == 2
    assert r.processed == pytest.approx(200.0)  # 12,000 records in 60 s
    assert r.backlog_growth == pytest.approx(50.0)  # 3,000 more in 60 s
    assert r.input_rate == pytest.approx(250.0)
    assert r.capacity == pytest.approx(200.0)  # 12,000 records in 60 busy seconds
    assert r.busy == pytest.approx(0.5)
    # half a window at least, and never across a driver's new counters
    assert rates(samples[:2], window_s=60) is None
    assert rates([samples[0], _sample(70, {"1": 5}, {"1": 1.0}, 0)], window_s=60) is None


def test_a_counter_that_went_down_gives_no_rates() -> None:
    samples = [_sample(0, {"1": 500}, {"1": 5.0}, 0), _sample(60, {"1": 100}, {"1": 6.0}, 0)]
    assert rates(samples, 60) is None


def test_the_executors_needed_follow_input_backlog_and_capacity() -> None:
    r = rates([_sample(0, {"1": 0}, {"1": 0.0}, 0), _sample(60, {"1": 6000}, {"1": 30.0}, 0)], 60)
    assert r is not None and r.capacity == pytest.approx(200.0) and r.input_rate == pytest.approx(100.0)
    # 100 records/s at 100 records/s per executor (50% of 200): one
    assert recommend(r, 3, SETTINGS)[0] == 1
    # plus a backlog of 30,000 to drain in 100 s: 400 records/s, four
    backlogged = rates([_sample(0, {"1": 0}, {"1": 0.0}, 30_000), _sample(60, {"1": 6000}, {"1": 30.0}, 30_000)], 60)
    assert backlogged is not None
    n, why = recommend(backlogged, 1, SETTINGS)
    assert n == 4 and "400 records/s" in why
    # bounded by maxReplicas
    huge = rates([_sample(0, {"1": 0}, {"1": 0.0}, 0), _sample(60, {"1": 6000}, {"1": 30.0}, 10**7)], 60)
    assert huge is not None and recommend(huge, 1, SETTINGS)[0] == 8


def test_rounds_that_cost_the_same_whatever_they_carry_are_not_taken_for_a_lack_of_capacity() -> None:
    # bench/autoscale.py's light load: two executors at 150 records/s each, busy 80% of the time,
    # 70 points of it their rounds' per-round cost (a commit every 100 ms on a quarter core)
    def window(per_round: float) -> list[Sample]:
        return [Sample(0, "d1", {"1": 0, "2": 0}, {"1": 0.0, "2": 0.0}, 0, {"1": 0.0, "2": 0.0}),
                Sample(60, "d1", {"1": 9000, "2": 9000}, {"1": 48.0, "2": 48.0}, 0,
                       {"1": per_round * 60, "2": per_round * 60})]

    light = rates(window(0.7), 60)
    assert light is not None and light.busy == pytest.approx(0.8) and light.per_round == pytest.approx(0.7)
    # records take 6 of every 60 s: 1,500 records per second of that, in the 30% the rounds leave
    assert light.capacity == pytest.approx(1500 * 0.3)
    assert recommend(light, 2, SETTINGS)[0] == 2  # 300 records/s at 225 per executor
    assert "70% per-round cost" in light.describe()
    # read as records per busy second (no per-round part known), the same load asks for more
    naive = rates(window(0.0), 60)
    assert naive is not None and naive.capacity == pytest.approx(187.5)
    assert recommend(naive, 2, SETTINGS)[0] == 4
    # a per-round part that is all the busy time is cut back to nine tenths of it (a floor on the
    # per-record cost, as the runners keep): the capacity stays finite
    allround = rates(window(0.8), 60)
    assert allround is not None and allround.per_round == pytest.approx(0.72)
    assert allround.capacity == pytest.approx(9000 / 4.8 * 0.28)


def test_the_highest_records_per_busy_second_seen_lately_is_a_floor_under_the_capacity() -> None:
    def window(at: float, records: int, busy_s: float, per_round_s: float) -> Rates:
        r = rates([Sample(at - 60, "d1", {"1": 0}, {"1": 0.0}, 0, {"1": 0.0}),
                   Sample(at, "d1", {"1": records}, {"1": busy_s}, 0, {"1": per_round_s})], 60)
        assert r is not None
        return r

    history = History()
    # under a backlog: 6,000 records/s, busy all the time, little of it per round
    loaded = window(100, 360_000, 60.0, 6.0)
    assert loaded.per_busy_second == pytest.approx(6000) and loaded.capacity == pytest.approx(6000 / 0.9 * 0.9)
    assert history.observe(100, loaded) == pytest.approx(6000)
    # then a light load whose rounds the runner's fit did not wholly tell apart: the model says
    # 1,000 records/s of capacity, the busy time 500; what was seen under load is taken
    light = window(400, 30_000, 60.0, 30.0)
    assert light.capacity == pytest.approx(1000 * 0.5) and light.per_busy_second == pytest.approx(500)
    assert history.observe(400, light) == pytest.approx(6000)
    n, why = recommend(light, 4, SETTINGS, observed=6000)
    assert n == 1 and "as observed under load" in why
    assert recommend(light, 4, SETTINGS)[0] == 2  # 500 records/s at 250 per executor
    # a decision starts the recommendations over, not what was observed; that ages out
    history.add(400, 1, keep_s=300)
    history.clear()
    assert history.recommended == [] and history.observe(100 + OBSERVED_KEEP_S - 1, light) == pytest.approx(6000)
    assert history.observe(100 + OBSERVED_KEEP_S + 1, light) == pytest.approx(500)


def test_idle_goes_to_the_minimum_and_unknown_capacity_keeps_what_there_is() -> None:
    idle = rates([_sample(0, {"1": 10}, {"1": 1.0}, 0), _sample(60, {"1": 10}, {"1": 1.0}, 0)], 60)
    assert idle is not None and recommend(idle, 4, SETTINGS) == (1, "no input and no backlog")
    stuck = rates([_sample(0, {"1": 10}, {"1": 1.0}, 0), _sample(60, {"1": 10}, {"1": 1.0}, 500)], 60)
    assert stuck is not None and recommend(stuck, 4, SETTINGS)[0] == 4


def test_scale_out_waits_for_its_window_and_takes_the_least_recommendation_within_the_step() -> None:
    h = History()
    h.add(0, 5, keep_s=200)
    assert decide(h, 10, 2, SETTINGS) is None  # not seen for 30 s yet
    h.add(20, 6, keep_s=200)
    h.add(35, 7, keep_s=200)
    d = decide(h, 35, 2, SETTINGS)
    # least over the last 30 s is 6 (the 5 at t=0 is older), but at most 2 at once
    assert d is not None and (d.current, d.target) == (2, 4)


def test_scale_in_needs_its_longer_window_and_takes_the_most_recommendation() -> None:
    h = History()
    for t in range(0, 121, 10):
        h.add(t, 2 if t != 60 else 3, keep_s=200)
    d = decide(h, 120, 5, SETTINGS)
    assert d is not None and (d.current, d.target) == (5, 3)
    short = History()
    short.add(60, 1, keep_s=200)
    assert decide(short, 120, 5, SETTINGS) is None
    # nothing to do when the recommendations agree with what runs
    same = History()
    for t in range(0, 121, 10):
        same.add(t, 5, keep_s=200)
    assert decide(same, 120, 5, SETTINGS) is None


def test_a_count_outside_the_bounds_is_brought_inside() -> None:
    h = History()
    h.add(0, 9, keep_s=200)
    d = decide(h, 0, 9, SETTINGS)
    assert d is not None and d.target == 8
