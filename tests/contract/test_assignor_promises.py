"""The assignor's last promises of Kafka Streams' (found by Kafka's assignor test invariants): a
balanced previous assignment with every copy caught up comes back as it was, a task has at most
one warmup at a time, and a move goes where the least is to restore."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eddy_contract.assignor import (
    Assignment,
    AssignorSettings,
    Executor,
    TaskAssignment,
    assign,
    assign_app,
    running_actives,
    task_lag,
)
from tests.contract.test_assignor_properties import MANY

pytestmark = pytest.mark.unit

NO_STANDBY = AssignorSettings(standby_replicas=0, acceptable_recovery_lag=100, max_warmup_replicas=2)


def _skew(executors: Iterable[str], placed: Iterable[str]) -> int:
    count = Counter(placed)
    loads = [count[e] for e in executors]
    return max(loads) - min(loads)


def _balanced(ids: list[str], tasks: dict[str, TaskAssignment], stateful: set[str]) -> bool:
    """Kafka Streams' balance with one thread per client: in total, per kind, per sub-topology
    and in stateful copies."""
    def actives(which: Iterable[str]) -> list[str]:
        return [tasks[t].active for t in which]

    subtopologies = {t.split("_")[0] for t in tasks}
    return (_skew(ids, actives(tasks)) <= 1
            and _skew(ids, actives(t for t in tasks if t in stateful)) <= 1
            and _skew(ids, actives(t for t in tasks if t not in stateful)) <= 1
            and all(_skew(ids, actives(t for t in tasks if t.split("_")[0] == s)) <= 1 for s in subtopologies)
            and _skew(ids, (e for t in stateful for e in (tasks[t].active, *tasks[t].standbys))) <= 1)


# (a) A balanced previous assignment, every copy caught up, the same executors: unchanged.


def test_balanced_stateless_tasks_stay_on_their_executors_with_the_same_generation() -> None:
    executors = [Executor("1"), Executor("2")]
    before = Assignment(3, MappingProxyType({"0_0": TaskAssignment("1"), "1_0": TaskAssignment("2"),
                                             "2_0": TaskAssignment("1")}))
    after = assign_app(executors, {"0_0": 0, "1_0": 0, "2_0": 100}, {"1": {"2_0": 100}}, before, NO_STANDBY, ["2_0"])
    assert after is before


def test_a_stateless_task_moves_back_to_its_previous_executor_when_loads_only_trade_places() -> None:
    # Filling up in task order puts 0_0 on executor 2 (1 holds the stateful active): 0_0 going back
    # to executor 1 and 0_1 to 2 leaves every load where it was.
    executors = [Executor("1"), Executor("2")]
    before = Assignment(3, MappingProxyType({"0_0": TaskAssignment("1"), "0_1": TaskAssignment("2"),
                                             "0_2": TaskAssignment("2"), "1_0": TaskAssignment("1")}))
    ends = {"0_0": 0, "0_1": 0, "0_2": 0, "1_0": 100}
    after = assign_app(executors, ends, {"1": {"1_0": 100}}, before, NO_STANDBY, ["1_0"])
    assert after is before


def test_a_stateful_target_moves_back_to_its_previous_caught_up_executor_when_loads_only_trade_places() -> None:
    # Dealing sub-topology 1's tasks over the least loaded cores leaves executor 1 (it holds 0_0)
    # without one of them; 1_0 staying there, 2_0's executor holding one fewer, is as balanced.
    executors = [Executor(str(i)) for i in range(1, 6)]
    placed = {"0_0": "1", "1_0": "1", "1_1": "3", "1_2": "4", "1_3": "5", "2_0": "2"}
    before = Assignment(3, MappingProxyType({t: TaskAssignment(e) for t, e in placed.items()}))
    held: dict[str, dict[str, int]] = {}
    for t, e in placed.items():
        held.setdefault(e, {})[t] = 1000
    after = assign_app(executors, dict.fromkeys(placed, 1000), held, before, NO_STANDBY, list(placed))
    assert after is before


def test_a_balanced_rotation_of_stateless_tasks_comes_back_whole() -> None:
    # Found by the property below: filling up places sub-topologies 0 and 2 so that no single move
    # or two-task swap gets back to this (balanced) previous placement without unbalancing a
    # sub-topology on the way, so it comes back whole.
    executors = [Executor(str(i)) for i in range(1, 6)]
    placed = {"0_0": "4", "0_1": "1", "1_0": "1", "1_1": "2", "1_2": "3",
              "2_0": "4", "2_1": "2", "2_2": "3", "2_3": "5"}
    before = Assignment(7, MappingProxyType({t: TaskAssignment(e) for t, e in placed.items()}))
    stateful = ["1_0", "1_1", "1_2"]
    end = {t: 1000 if t in stateful else 0 for t in placed}
    held = {placed[t]: {t: 1000} for t in stateful}
    assert _balanced([e.id for e in executors], dict(before.tasks), set(stateful))
    assert assign_app(executors, end, held, before, NO_STANDBY, stateful) is before


@st.composite
def balanced_apps(draw: st.DrawFn) -> tuple[list[Executor], dict[str, int], dict[str, dict[str, int]], Assignment,
                                            AssignorSettings, list[str]]:
    """A balanced assignment with every copy caught up: the assignor's own from scratch, with its
    executors relabelled and pairs of tasks of one kind trading places while that stays balanced."""
    ids = [str(i) for i in range(1, draw(st.integers(1, 5)) + 1)]
    executors = [Executor(i) for i in ids]
    subtopologies = draw(st.integers(1, 3))
    tasks = [f"{s}_{p}" for s in range(subtopologies) for p in range(draw(st.integers(1, 6)))]
    stateless = draw(st.sets(st.integers(0, subtopologies - 1), max_size=subtopologies - 1))
    stateful = [t for t in tasks if int(t.split("_")[0]) not in stateless]
    end = {t: 1000 if t in stateful else 0 for t in tasks}
    cfg = AssignorSettings(draw(st.integers(0, 2)), 10, draw(st.integers(0, 2)))
    everywhere = {e: dict(end) for e in ids}
    first = assign_app(executors, end, everywhere, None, cfg, stateful)
    relabel = dict(zip(ids, draw(st.permutations(ids)), strict=True))
    placed = {t: TaskAssignment(relabel[p.active], tuple(sorted(relabel[e] for e in p.standbys)))
              for t, p in first.tasks.items()}
    for t, u in draw(st.lists(st.tuples(st.sampled_from(tasks), st.sampled_from(tasks)), max_size=12)):
        if (t in stateful) != (u in stateful):
            continue
        pt, pu = placed[t], placed[u]
        traded = {**placed, t: TaskAssignment(pu.active, pt.standbys), u: TaskAssignment(pt.active, pu.standbys)}
        if all(len(set(traded[x].copies)) == len(traded[x].copies) for x in (t, u)) \
                and _balanced(ids, traded, set(stateful)):
            placed = traded
    held = everywhere if draw(st.booleans()) else {
        e: {t: end[t] for t, p in placed.items() if e in p.copies and t in stateful} for e in ids}
    return executors, end, held, Assignment(7, MappingProxyType(placed)), cfg, stateful


@MANY
@given(balanced_apps())
def test_a_balanced_previous_assignment_with_every_copy_caught_up_comes_back_unchanged(app: tuple) -> None:  # type: ignore[type-arg]
    executors, end, held, previous, cfg, stateful = app
    assert _balanced([e.id for e in executors], dict(previous.tasks), set(stateful))
    assert assign_app(executors, end, held, previous, cfg, stateful) is previous


@MANY
@given(balanced_apps(), st.integers(min_value=1, max_value=5_000))
def test_running_actives_stay_put_whatever_lag_their_figures_show(app: tuple, behind: int) -> None:  # type: ignore[type-arg]
    """Kafka Streams' running actives report their offsets as "latest": an active's figures (end
    and held read at different moments while it writes) never move it off a balanced assignment."""
    executors, end, held, previous, cfg, stateful = app
    noisy = {e: dict(tasks) for e, tasks in held.items()}
    for t, p in previous.tasks.items():
        if t in stateful:
            noisy.setdefault(p.active, {})[t] = end[t] - cfg.acceptable_recovery_lag - behind
    running = running_actives(previous, previous.generation, [])
    assert assign_app(executors, end, noisy, previous, cfg, stateful, running=running) is previous


def test_actives_do_not_flap_between_two_caught_up_executors_on_their_figures_noise() -> None:
    """Recorded in `bench/upgrade.py --cases "node lost for good"` (2,000 records/s, lag 100): with
    the actives judged on their figures, 1_0 and 1_2 went back to executor 1 (then to 3 again,
    six generations in nine seconds); running, they stay."""
    executors = [Executor("1", pod="spark-s-wordcount-0-0", zone="zone-a"),
                 Executor("3", pod="spark-s-wordcount-0-1", zone="zone-a")]
    stateless = {f"0_{p}": a for p, a in enumerate("3113")}
    stateful = {"1_0": ("3", "1"), "1_1": ("1", "3"), "1_2": ("3", "1"), "1_3": ("1", "3")}
    previous = Assignment(7, MappingProxyType({
        **{t: TaskAssignment(a) for t, a in stateless.items()},
        **{t: TaskAssignment(a, (s,)) for t, (a, s) in stateful.items()}}))
    end = {**{t: 0 for t in stateless}, "1_0": 2572759, "1_1": 2574048, "1_2": 2566828, "1_3": 2573029}
    held = {"1": {"1_0": 2572758, "1_1": 2573922, "1_2": 2566638, "1_3": 2572896},
            "3": {"1_0": 2572645, "1_1": 2541243, "1_2": 2566608, "1_3": 2572380}}
    cfg = AssignorSettings(standby_replicas=1, acceptable_recovery_lag=100, max_warmup_replicas=2)
    judged_on_figures = assign_app(executors, end, held, previous, cfg, list(stateful))
    assert {t: judged_on_figures.tasks[t].active for t in ("1_0", "1_2")} == {"1_0": "1", "1_2": "1"}
    # 1_1's standby on 3 is restoring; the driver runs generation 7
    running = running_actives(previous, 7, [("3", "1_1")])
    assert running == {("3", "1_0"), ("1", "1_1"), ("3", "1_2"), ("1", "1_3"), ("3", "0_0"), ("1", "0_1"),
                       ("1", "0_2"), ("3", "0_3")}
    assert assign_app(executors, end, held, previous, cfg, list(stateful), running=running) is previous


def test_no_active_runs_before_the_runtime_takes_its_generation_nor_while_it_restores() -> None:
    previous = Assignment(4, MappingProxyType({"1_0": TaskAssignment("1", ("2",)), "1_1": TaskAssignment("2")}))
    assert running_actives(previous, 3, []) == set()
    assert running_actives(None, 3, []) == set()
    assert running_actives(previous, 4, [("1", "1_0")]) == {("2", "1_1")}


# (b) At most one warmup per task at a time.


def test_a_task_gets_one_warmup_at_a_time_even_when_two_of_its_standbys_have_to_move() -> None:
    # 0_1 is caught up on 1, 2 and 4; its standbys belong on the empty executors 5 and 6.
    cfg = AssignorSettings(standby_replicas=2, acceptable_recovery_lag=10, max_warmup_replicas=2)
    executors = [Executor(str(i)) for i in range(1, 8)]
    held = {"1": {"0_1": 1000}, "2": {"0_1": 1000}, "4": {"0_1": 1000}}
    first = assign(executors, {"0_0": 1000, "0_1": 1000}, held, None, cfg)
    assert all(len(p.warmups) <= 1 for p in first.tasks.values()), first.tasks
    assert first.tasks["0_1"].warmups, "the move that waits still gets its warmup"


# (c) A move goes where the least is to restore.

ENDS = {f"0_{p}": 50_007 for p in range(4)}
PAIRS = [("0_0", "0_1"), ("0_0", "0_2"), ("0_0", "0_3"), ("0_1", "0_2"), ("0_1", "0_3"), ("0_2", "0_3")]


def _failed_over() -> Assignment:
    """Executor 1 was lost: every task's active is on executor 2, which restored them."""
    return Assignment(5, MappingProxyType({t: TaskAssignment("2") for t in ENDS}))


@pytest.mark.parametrize("tail", [40, 100, 101, 5000])
@pytest.mark.parametrize("held_before", PAIRS)
def test_an_executor_back_under_a_new_id_gets_back_the_tasks_its_volume_holds(
        tail: int, held_before: tuple[str, str]) -> None:
    # failover_pods.py without standbys: executor 1's pod came back on its volume as executor 3,
    # the two tasks it held a tail behind their changelogs' ends (`tail` beyond
    # acceptableRecoveryLag: its checkpoint trails, and input flowed while it was away).
    executors = [Executor("2"), Executor("3")]
    held = {"2": dict(ENDS), "3": {t: ENDS[t] - tail for t in held_before}}
    after = assign_app(executors, ENDS, held, _failed_over(), NO_STANDBY, list(ENDS))
    to_restore = sum(task_lag(ENDS[t], held["3"].get(t)) for t, p in after.tasks.items() if "3" in p.copies)
    assert to_restore == 2 * tail, after.tasks
    # caught up: the active moves at once; else it waits on executor 2 while 3 warms up
    back = ("3",) if tail <= NO_STANDBY.acceptable_recovery_lag else ("2", "3")
    for t, p in after.tasks.items():
        assert p.copies == (back if t in held_before else ("2",)), (t, p)


def test_once_the_returning_executors_warmups_caught_up_it_holds_their_actives() -> None:
    executors = [Executor("2"), Executor("3")]
    held = {"2": dict(ENDS), "3": {"0_0": ENDS["0_0"] - 500, "0_1": ENDS["0_1"] - 500}}
    warming = assign_app(executors, ENDS, held, _failed_over(), NO_STANDBY, list(ENDS))
    held["3"] = {"0_0": ENDS["0_0"], "0_1": ENDS["0_1"]}
    done = assign_app(executors, ENDS, held, warming, NO_STANDBY, list(ENDS))
    assert {t: p.active for t, p in done.tasks.items()} == {"0_0": "3", "0_1": "3", "0_2": "2", "0_3": "2"}
    assert all(not p.warmups for p in done.tasks.values())
