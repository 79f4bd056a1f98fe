"""A runner's busy time (executor/busy_clock.py): spans that process input at once share the time
they overlap, so the shares add up to the time the runner was busy, never to more (pure)."""

from __future__ import annotations

import threading

import pytest

from eddy_runtime.executor.busy_clock import BusyClock

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
