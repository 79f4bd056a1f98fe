"""The five minimal cases of issue 12, where the assignor broke Kafka Streams' promises."""

from __future__ import annotations

from collections import Counter
from types import MappingProxyType

import pytest

from eddy_contract.assignor import Assignment, AssignorSettings, Executor, TaskAssignment, assign, assign_app

pytestmark = pytest.mark.unit


def executors(n: int) -> list[Executor]:
    return [Executor(str(i)) for i in range(1, n + 1)]


def previous(**tasks: TaskAssignment) -> Assignment:
    return Assignment(3, MappingProxyType(tasks))


def actives(a: Assignment, tasks: object = None) -> Counter[str]:
    return Counter(p.active for t, p in a.tasks.items() if tasks is None or t in tasks)  # type: ignore[operator]


def copies(a: Assignment) -> Counter[str]:
    return Counter(e for p in a.tasks.values() for e in (p.active, *p.standbys))


def test_1_a_stateless_task_goes_where_no_stateful_active_is() -> None:
    cfg = AssignorSettings(standby_replicas=0)
    a = assign_app(executors(2), {"0_0": 0, "1_0": 0}, {}, None, cfg, ["1_0"])
    assert actives(a) == {"1": 1, "2": 1}


def test_1_stateless_tasks_balance_the_total_around_stateful_ones_that_cannot_move() -> None:
    stateful = [f"1_{p}" for p in range(4)]
    ends = {**{t: 1000 for t in stateful}, **{f"0_{p}": 0 for p in range(3)}}
    held = {"1": {t: 1000 for t in stateful}}
    prev = previous(**{t: TaskAssignment("1") for t in stateful})
    cfg = AssignorSettings(standby_replicas=0, acceptable_recovery_lag=100, max_warmup_replicas=0)
    a = assign_app(executors(2), ends, held, prev, cfg, stateful)
    assert actives(a, stateful) == {"1": 4}  # executor 2 lags on all of them and has no warmup
    assert actives(a) == {"1": 4, "2": 3}


def test_2_a_caught_up_standby_is_kept_until_a_warmup_has_caught_up() -> None:
    tasks = ["0_0", "0_1", "0_2"]
    ends = {t: 1000 for t in tasks}
    held = {"1": dict(ends), "2": dict(ends)}
    prev = previous(**{t: TaskAssignment("1", ("2",)) for t in tasks})
    cfg = AssignorSettings(standby_replicas=1, acceptable_recovery_lag=100, max_warmup_replicas=0)
    a = assign(executors(3), ends, held, prev, cfg)
    for t, p in a.tasks.items():
        assert set(p.copies) == {"1", "2"}, (t, p)  # nothing starts a restore on executor 3
    # with one warmup allowed, exactly one copy is restored on 3, next to the two hot ones
    one = assign(executors(3), ends, held, prev, AssignorSettings(1, 100, 1))
    assert all({p.active, *p.standbys} == {"1", "2"} for p in one.tasks.values())
    assert sum(len(p.warmups) for p in one.tasks.values()) == 1


def test_3_stateful_copies_are_balanced_from_scratch() -> None:
    a = assign(executors(3), {"0_0": 100, "0_1": 100}, {}, None, AssignorSettings(standby_replicas=1))
    assert sorted(copies(a).values()) == [1, 1, 2]


def test_3_stateful_copies_are_balanced_when_lag_does_not_matter() -> None:
    tasks = [f"0_{p}" for p in range(9)]
    ends = {t: 1000 for t in tasks}
    cfg = AssignorSettings(standby_replicas=1, acceptable_recovery_lag=2**63 - 1, max_warmup_replicas=2)
    a = assign(executors(3), ends, {"1": dict(ends)}, previous(**{t: TaskAssignment("1") for t in tasks}), cfg)
    assert copies(a) == {"1": 6, "2": 6, "3": 6}
    assert actives(a) == {"1": 3, "2": 3, "3": 3}


def test_4_each_sub_topology_is_spread_over_the_executors() -> None:
    tasks = ["0_0", "0_1", "1_0", "1_1"]
    ends = {t: 100 for t in tasks}
    held = {"1": dict(ends)}
    cfg = AssignorSettings(standby_replicas=0, acceptable_recovery_lag=10, max_warmup_replicas=1)
    current = previous(**{t: TaskAssignment("1") for t in tasks})
    for _ in range(10):  # every round, each copy catches up
        nxt = assign(executors(2), ends, held, current, cfg)
        if nxt is current:
            break
        current = nxt
        for t, p in current.tasks.items():
            for e in p.copies:
                held.setdefault(e, {})[t] = ends[t]
    else:
        raise AssertionError("no fixed point in 10 rounds")
    for s in "01":
        assert actives(current, [t for t in tasks if t[0] == s]) == {"1": 1, "2": 1}, current


def test_5_the_same_inputs_give_the_same_assignment_and_generation() -> None:
    ends = {"0_0": 50, "1_0": 0, "2_0": 50}
    held = {"4": {"0_0": 50, "2_0": 49}}
    cfg = AssignorSettings(standby_replicas=1, acceptable_recovery_lag=0, max_warmup_replicas=0)
    first = assign(executors(4), ends, held, None, cfg)
    assert assign(executors(4), ends, held, first, cfg) is first


def test_executors_take_load_in_proportion_to_their_cores() -> None:
    tasks = {f"{s}_{p}": 0 for s in range(2) for p in range(4)}
    cores = [Executor("1", cores=1), Executor("2", cores=3)]
    a = assign_app(cores, tasks, {}, None, AssignorSettings(standby_replicas=0), [t for t in tasks if t[0] == "1"])
    assert actives(a) == {"1": 2, "2": 6}
    for s in "01":  # each sub-topology too
        assert actives(a, [t for t in tasks if t[0] == s]) == {"1": 1, "2": 3}


def test_the_same_copy_gives_way_to_a_hot_one_every_round() -> None:
    """Two not-caught-up standby targets in one zone: the hot copy must replace the same one each
    round (the warmup under way), not alternate between them (a CI run found the 2-cycle)."""
    zones = [("1", "a", 1), ("2", "b", 1), ("3", None, 2), ("4", "b", 1), ("5", "a", 1), ("6", None, 3)]
    execs = [Executor(i, f"pod-{i}", z, c) for i, z, c in zones]
    ends = {"0_0": 100, "0_1": 100, "0_2": 1000}
    held = {"2": {"0_0": 0, "0_1": 0, "0_2": 990}, "4": {"0_0": 0, "0_1": 0, "0_2": 990}}
    cfg = AssignorSettings(standby_replicas=3, acceptable_recovery_lag=10, max_warmup_replicas=1)
    first = assign_app(execs, ends, held, None, cfg, list(ends))
    assert first.tasks["0_2"].active == "2" and "4" in first.tasks["0_2"].standbys
    assert assign_app(execs, ends, held, first, cfg, list(ends)) is first


def test_a_previous_standby_keeps_its_place_and_a_new_target_gives_way_to_the_hot_copy() -> None:
    """Balance asks for a new standby target (1) while the task's previous standby (6) and a hot
    copy (4) are elsewhere: the newcomer gives way, the previous standby stays (another 2-cycle)."""
    zones = [("1", "a", 1), ("2", "a", 1), ("3", "b", 1), ("4", "c", 1), ("5", "a", 1), ("6", None, 2)]
    execs = [Executor(i, f"pod-{i}", z, c) for i, z, c in zones]
    ends = {t: 100 for t in ["0_0", *(f"1_{p}" for p in range(5)), *(f"2_{p}" for p in range(8))]}
    ends["2_6"] = 101
    holds = {t: 0 for t in ends} | {"2_6": 1}
    cfg = AssignorSettings(standby_replicas=2, acceptable_recovery_lag=100, max_warmup_replicas=0)
    first = assign_app(execs, ends, {"3": holds, "4": holds}, None, cfg, list(ends))
    assert assign_app(execs, ends, {"3": holds, "4": holds}, first, cfg, list(ends)) is first
