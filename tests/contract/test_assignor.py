"""Property-based tests of the assignor's invariants (KIP-441 placement, KIP-708 zone spread)."""

from __future__ import annotations

import random
import time
from collections import Counter
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy_contract.assignor import (
    Assignment,
    AssignmentError,
    AssignorSettings,
    Executor,
    TaskAssignment,
    assign,
    diff,
    task_lag,
    task_sort_key,
)

pytestmark = pytest.mark.unit

EXAMPLES = settings()  # examples: the profile (tests/contract/conftest.py)
ZONES = ["zone-a", "zone-b", "zone-c", None]


@st.composite
def scenarios(draw, with_previous: bool = True):
    n = draw(st.integers(1, 6))
    ids = draw(st.lists(st.sampled_from([f"{i}" for i in range(1, 13)]), min_size=n, max_size=n, unique=True))
    executors = [Executor(i, f"pod-{i}", draw(st.sampled_from(ZONES))) for i in ids]
    tasks = [f"{s}_{p}" for s in range(draw(st.integers(1, 2))) for p in range(draw(st.integers(1, 9)))]
    end = {t: draw(st.sampled_from([0, 10, 100, 1000, draw(st.integers(0, 5000))])) for t in tasks}
    held: dict[str, dict[str, int]] = {}
    for e in ids:
        holds = draw(st.lists(st.sampled_from(tasks), unique=True))
        held[e] = {t: draw(st.integers(0, end[t] + 5)) for t in holds}
    previous = draw(prior_assignments(tasks, ids)) if with_previous else None
    cfg = AssignorSettings(
        standby_replicas=draw(st.integers(0, 3)),
        acceptable_recovery_lag=draw(st.sampled_from([0, 10, 100, 10000])),
        max_warmup_replicas=draw(st.integers(0, 3)),
    )
    return executors, end, held, previous, cfg


@st.composite
def prior_assignments(draw, tasks, ids):
    """None, or a previous assignment of some of `tasks` naming live `ids` and dead executors."""
    if not draw(st.booleans()):
        return None
    pool = [*ids, "dead-1", "dead-2"]
    prev_tasks = {}
    for t in draw(st.lists(st.sampled_from(tasks), unique=True)):
        copies = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4, unique=True))
        split = draw(st.integers(1, len(copies)))
        prev_tasks[t] = TaskAssignment(copies[0], tuple(sorted(copies[1:split])), tuple(sorted(copies[split:])))
    return Assignment(draw(st.integers(1, 50)), MappingProxyType(prev_tasks))


def lag_of(end, held, executor, task):
    return task_lag(end[task], held.get(executor, {}).get(task))


@EXAMPLES
@given(scenarios())
def test_every_task_has_one_active_on_a_live_executor(scenario):
    executors, end, held, previous, cfg = scenario
    result, live = assign(*scenario), {e.id for e in executors}
    assert set(result.tasks) == set(end)
    for placement in result.tasks.values():
        assert isinstance(placement.active, str) and placement.active in live


@EXAMPLES
@given(scenarios())
def test_never_two_copies_of_a_task_on_one_executor_and_only_live_executors(scenario):
    executors, end, held, previous, cfg = scenario
    result, live = assign(*scenario), {e.id for e in executors}
    for placement in result.tasks.values():
        assert len(set(placement.copies)) == len(placement.copies)
        assert set(placement.copies) <= live


@EXAMPLES
@given(scenarios())
def test_standbys_are_min_of_requested_and_other_executors(scenario):
    executors, end, held, previous, cfg = scenario
    result = assign(*scenario)
    wanted = min(cfg.standby_replicas, len(executors) - 1)
    assert all(len(p.standbys) == wanted for p in result.tasks.values())


@EXAMPLES
@given(scenarios())
def test_standbys_spread_over_zones_when_zones_allow(scenario):
    executors, end, held, previous, cfg = scenario
    result = assign(*scenario)
    zone = {e.id: e.zone for e in executors}
    zones_available = len(set(zone.values()))
    for placement in result.tasks.values():
        copies = (placement.active, *placement.standbys)
        assert len({zone[e] for e in copies}) == min(len(copies), zones_available)


@EXAMPLES
@given(scenarios())
def test_warmups_stay_within_max_warmup_replicas(scenario):
    executors, end, held, previous, cfg = scenario
    result = assign(*scenario)
    assert sum(len(p.warmups) for p in result.tasks.values()) <= cfg.max_warmup_replicas


@EXAMPLES
@given(scenarios())
def test_an_active_moves_only_to_a_copy_within_acceptable_recovery_lag(scenario):
    executors, end, held, previous, cfg = scenario
    result, live = assign(*scenario), {e.id for e in executors}

    def caught_up(e, t):
        return lag_of(end, held, e, t) <= cfg.acceptable_recovery_lag

    for t, placement in result.tasks.items():
        a = placement.active
        freshest = min(lag_of(end, held, e, t) for e in live)
        p = previous.tasks[t].active if previous is not None and t in previous.tasks else None
        if p in live and caught_up(p, t):
            # sticky: it may only leave for another caught-up copy (balance)
            assert a == p or caught_up(a, t)
        elif p in live:
            # its own copy is behind: only a strictly fresher copy may take it
            assert a == p or caught_up(a, t) or lag_of(end, held, a, t) < lag_of(end, held, p, t)
            assert caught_up(a, t) or lag_of(end, held, a, t) == min(freshest, lag_of(end, held, p, t))
        else:
            # new or orphaned: the freshest copy, or a caught-up one if balance moved it
            assert caught_up(a, t) or lag_of(end, held, a, t) == freshest


@EXAMPLES
@given(scenarios(), st.randoms(use_true_random=False))
def test_assignment_is_deterministic_whatever_the_input_order(scenario, rnd):
    executors, end, held, previous, cfg = scenario
    first = assign(executors, end, held, previous, cfg)
    shuffled_executors = list(executors)
    rnd.shuffle(shuffled_executors)
    end_items = list(end.items())
    rnd.shuffle(end_items)
    held_items = [(e, dict(sorted(h.items(), key=lambda _: rnd.random()))) for e, h in held.items()]
    rnd.shuffle(held_items)
    second = assign(shuffled_executors, dict(end_items), dict(held_items), previous, cfg)
    assert second == first
    assert assign(executors, end, held, previous, cfg) == first


def settle(executors, end, held, previous, cfg, rounds):
    """Run rounds in which every copy of the last assignment has caught up, until nothing moves."""
    held = {e: dict(h) for e, h in held.items()}
    current = assign(executors, end, held, previous, cfg)
    for _ in range(rounds):
        for t, placement in current.tasks.items():
            for e in placement.copies:
                held.setdefault(e, {})[t] = end[t]
        nxt = assign(executors, end, held, current, cfg)
        if nxt.generation == current.generation:
            assert nxt == current
            return current, held
        current = nxt
    raise AssertionError(f"no fixed point after {rounds} rounds")


@EXAMPLES
@given(scenarios())
def test_nothing_moves_without_a_reason_and_warmups_lead_to_balance(scenario):
    executors, end, held, previous, cfg = scenario
    settled, settled_held = settle(executors, end, held, previous, cfg, rounds=4 * len(end) + 10)
    # at the fixed point the same inputs give back the very same assignment
    assert assign(executors, end, settled_held, settled, cfg) is settled
    loads = Counter({e.id: 0 for e in executors})
    loads.update(p.active for p in settled.tasks.values())
    if cfg.max_warmup_replicas >= 1:
        assert max(loads.values()) - min(loads.values()) <= 1
    # balanced and caught up: no move is planned, so no warmup is left
    assert all(not p.warmups for p in settled.tasks.values())


@st.composite
def balanced_caught_up(draw):
    """A previous assignment of live executors whose actives are balanced in total and per
    sub-topology (loads differ by at most one) and each within acceptableRecoveryLag on its
    executor; standbys, warmups, other copies and settings anything."""
    executors, end, held, _, cfg = draw(scenarios(with_previous=False))
    ids = draw(st.permutations([e.id for e in executors]))
    held = {e: dict(h) for e, h in held.items()}
    placements = {}
    by_subtopology = sorted(end, key=task_sort_key)
    shuffled = [t for s in sorted({task_sort_key(t)[0] for t in end})
                for t in draw(st.permutations([t for t in by_subtopology if task_sort_key(t)[0] == s]))]
    for i, t in enumerate(shuffled):
        active = ids[i % len(ids)]  # round robin over each sub-topology in turn: balanced
        held.setdefault(active, {})[t] = end[t] - draw(st.integers(0, min(cfg.acceptable_recovery_lag, end[t])))
        others = [e for e in ids if e != active]
        copies = draw(st.lists(st.sampled_from(others), unique=True)) if others else []
        split = draw(st.integers(0, len(copies)))
        placements[t] = TaskAssignment(active, tuple(sorted(copies[:split])), tuple(sorted(copies[split:])))
    return executors, end, held, Assignment(draw(st.integers(1, 50)), MappingProxyType(placements)), cfg


@EXAMPLES
@given(balanced_caught_up())
def test_a_balanced_caught_up_assignment_keeps_every_active(scenario):
    executors, end, held, previous, cfg = scenario
    for part in (previous.tasks, *({t: p for t, p in previous.tasks.items() if t[0] == s} for s in "01")):
        loads = Counter({e.id: 0 for e in executors})
        loads.update(p.active for p in part.values())
        assert max(loads.values()) - min(loads.values()) <= 1  # the premise holds in every example
    assert all(lag_of(end, held, p.active, t) <= cfg.acceptable_recovery_lag for t, p in previous.tasks.items())
    result = assign(*scenario)
    assert {t: p.active for t, p in result.tasks.items()} == {t: p.active for t, p in previous.tasks.items()}


@EXAMPLES
@given(scenarios(with_previous=False), st.data())
def test_losing_an_executor_promotes_a_standby_of_each_of_its_tasks(scenario, data):
    executors, end, held, _, cfg = scenario
    if len(executors) < 2:
        executors = [*executors, Executor("extra", "pod-extra", "zone-c")]
    settled, _ = settle(executors, end, {}, None, cfg, rounds=4 * len(end) + 10)
    # volumes hold exactly the settled copies, all caught up
    held_now: dict[str, dict[str, int]] = {}
    for t, placement in settled.tasks.items():
        for e in placement.copies:
            held_now.setdefault(e, {})[t] = end[t]
    dead = data.draw(st.sampled_from([e.id for e in executors]))
    survivors = [e for e in executors if e.id != dead]
    after = assign(survivors, end, held_now, settled, cfg)
    assert (
        after.generation == settled.generation + 1
        or not settled.active_tasks(dead)
        and not any(dead in p.copies for p in settled.tasks.values())
    )
    for t in settled.active_tasks(dead):
        before = settled.tasks[t]
        hot = [e for e in (*before.standbys, *before.warmups) if e != dead]
        if hot and end[t] > cfg.acceptable_recovery_lag:
            assert after.tasks[t].active in hot, (t, before, after.tasks[t])
    kinds = {m.kind for m in diff(settled, after) if m.task in settled.active_tasks(dead)}
    if cfg.standby_replicas and any(end[t] > cfg.acceptable_recovery_lag for t in settled.active_tasks(dead)):
        assert "promoted" in kinds


def test_an_unchanged_assignment_keeps_its_generation_and_a_change_bumps_it():
    executors = [Executor("1", zone="a"), Executor("2", zone="b")]
    end = {"0_0": 5, "0_1": 5}
    first = assign(executors, end, {}, None, AssignorSettings())
    assert first.generation == 1
    assert assign(executors, end, {}, first, AssignorSettings()) is first
    second = assign(executors[:1], end, {}, first, AssignorSettings())
    assert second.generation == 2
    assert all(p.active == "1" and p.standbys == () for p in second.tasks.values())


def test_a_lagging_destination_gets_a_warmup_instead_of_the_active():
    # executor 3 joins empty; tasks are stateful and far behind there
    executors = [Executor("1"), Executor("2"), Executor("3")]
    end = {f"0_{p}": 1_000_000 for p in range(6)}
    prev = {f"0_{p}": TaskAssignment("1" if p % 2 == 0 else "2") for p in range(6)}
    held = {
        "1": {t: 1_000_000 for t, a in prev.items() if a.active == "1"},
        "2": {t: 1_000_000 for t, a in prev.items() if a.active == "2"},
    }
    cfg = AssignorSettings(standby_replicas=0, acceptable_recovery_lag=100, max_warmup_replicas=1)
    result = assign(executors, end, held, Assignment(7, MappingProxyType(prev)), cfg)
    assert {t: p.active for t, p in result.tasks.items()} == {t: p.active for t, p in prev.items()}
    assert [e for p in result.tasks.values() for e in p.warmups] == ["3"]
    # once the warmup caught up, the task moves and the warmup is gone
    (warm_task,) = [t for t, p in result.tasks.items() if p.warmups]
    held["3"] = {warm_task: 999_950}
    moved = assign(executors, end, held, result, cfg)
    assert moved.tasks[warm_task].active == "3"
    assert moved.generation == result.generation + 1


def test_no_executor_is_an_error_not_an_empty_assignment():
    with pytest.raises(AssignmentError):
        assign([], {"0_0": 0}, {}, None, AssignorSettings())
    with pytest.raises(AssignmentError):
        assign([Executor("1"), Executor("1")], {"0_0": 0}, {}, None, AssignorSettings())


def test_tasks_sort_numerically():
    assert sorted(["0_10", "1_0", "0_2", "x"], key=task_sort_key) == ["0_2", "0_10", "1_0", "x"]


def test_failover_assignment_is_fast_enough_for_one_second_budget():
    rnd = random.Random(7)
    executors = [Executor(str(i), zone=f"z{i % 3}") for i in range(12)]
    end = {f"{s}_{p}": rnd.randrange(10**6) for s in range(4) for p in range(64)}
    cfg = AssignorSettings(standby_replicas=2, acceptable_recovery_lag=10000, max_warmup_replicas=2)
    settled, held = settle(executors, end, {}, None, cfg, rounds=400)
    t0 = time.perf_counter()
    after = assign(executors[1:], end, held, settled, cfg)
    elapsed = time.perf_counter() - t0
    print(f"assign: 256 tasks, 12 -> 11 executors, standbys=2: {elapsed * 1000:.1f} ms")
    assert after.generation == settled.generation + 1
    assert elapsed < 0.5
