"""A runner's busy time (executor/busy_clock.py): spans that process input at once share the time
they overlap, so the shares add up to the time the runner was busy, never to more (pure)."""

from __future__ import annotations

import threading

import pytest

from eddy_runtime.executor.busy_clock import BusyClock, RoundCost

pytestmark = pytest.mark.unit


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_span_alone_is_credited_its_whole_time_and_the_idle_time_between_spans_counts_for_none():
    clock = Clock()
    busy = BusyClock(clock)
    with busy.busy() as first:
        clock.now += 0.25
    clock.now += 10.0  # waiting for input
    with busy.busy() as second:
        clock.now += 0.5
    assert (first.seconds, second.seconds) == (0.25, 0.5)


def test_overlapping_spans_share_the_time_they_overlap_and_add_up_to_the_busy_time():
    clock = Clock()
    busy = BusyClock(clock)
    a = busy.busy()
    b = busy.busy()
    share_a = a.__enter__()
    clock.now += 1.0  # a alone
    share_b = b.__enter__()
    clock.now += 2.0  # a and b: one second each
    a.__exit__(None, None, None)
    clock.now += 0.5  # b alone
    b.__exit__(None, None, None)
    assert share_a.seconds == pytest.approx(2.0)
    assert share_b.seconds == pytest.approx(1.5)
    assert share_a.seconds + share_b.seconds == pytest.approx(3.5)  # the 3.5 s at least one ran


def test_a_span_that_raises_still_ends_and_counts():
    clock = Clock()
    busy = BusyClock(clock)
    with pytest.raises(RuntimeError), busy.busy() as failed:
        clock.now += 0.1
        raise RuntimeError("the round's commit failed")
    with busy.busy() as after:
        clock.now += 0.1
    assert failed.seconds == pytest.approx(0.1) and after.seconds == pytest.approx(0.1)


def test_on_the_real_clock_threads_busy_at_once_are_credited_no_more_than_the_wall_time():
    import time

    busy = BusyClock()
    shares = []
    started = time.monotonic()

    def work() -> None:
        with busy.busy() as share:
            time.sleep(0.1)
        shares.append(share.seconds)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    assert len(shares) == 4
    assert 0.09 <= sum(shares) <= wall


def test_a_rounds_cost_is_split_into_what_it_costs_whatever_it_carries_and_per_record():
    cost = RoundCost()
    sizes = [1, 40, 7, 120, 15, 3, 60, 90, 2, 25] * 4
    for i, n in enumerate(sizes):
        if i == 29:
            assert cost.estimate() is None  # not enough rounds yet
        cost.add(n, 0.008 + 0.00005 * n)  # 8 ms a round, 50 us a record
    per_round, per_record = cost.estimate()
    assert per_round == pytest.approx(0.008) and per_record == pytest.approx(0.00005)
    # a round's per-round part: the estimate, never more than the round took
    assert cost.fixed_part(10, 0.0085) == pytest.approx(0.008, rel=0.01)
    assert cost.fixed_part(10, 0.002) == 0.002


def test_rounds_that_all_carry_as_much_give_no_estimate_and_a_flat_fit_keeps_records_costing_something():
    same = RoundCost()
    for _ in range(100):
        same.fixed_part(10, 0.01)
    assert same.estimate() is None and same.fixed_part(10, 0.01) == 0.0
    # busy time that does not follow the records (noise only): records still cost a tenth of the
    # mean time per record, so no capacity estimate can come out unbounded
    flat = RoundCost()
    for i in range(100):
        flat.add([1, 50][i % 2], [0.012, 0.008][(i // 2) % 2])
    per_round, per_record = flat.estimate()
    mean_per_record = 0.01 / 25.5
    assert per_record == pytest.approx(0.1 * mean_per_record, rel=0.01)  # (the weighted mean)
    assert per_round == pytest.approx(0.01 - per_record * 25.5, rel=0.01)


def test_older_rounds_weigh_less_so_the_estimate_follows_a_changed_cost():
    cost = RoundCost(decay=0.99)
    for i in range(2000):
        n = 1 + (i * 37) % 100
        cost.add(n, (0.008 if i < 1000 else 0.002) + 0.00005 * n)
    per_round, per_record = cost.estimate()
    assert per_round == pytest.approx(0.002, abs=1e-4) and per_record == pytest.approx(0.00005, rel=0.02)
