"""The assignor's rules one at a time (`eddy_contract.assignment`): what each promises on its own,
before `plan` puts them together."""

from __future__ import annotations

import pytest

from eddy_contract.assignment.app_tasks import AppTasks, TaskGroup
from eddy_contract.assignment.client_state import ClientState
from eddy_contract.assignment.model import Executor, TaskAssignment
from eddy_contract.assignment.standbys import place_standbys
from eddy_contract.assignment.stateless import place_stateless
from eddy_contract.assignment.task_movement import PlannedMove, actual_actives, place_warmups
from eddy_contract.tasks import Role

pytestmark = pytest.mark.unit

END = 1000


def clients(held: dict[str, dict[str, int]], previous: dict[str, TaskAssignment] | None = None,
            executors: list[Executor] | None = None, tasks: tuple[str, ...] = ("0_0",)) -> ClientState:
    executors = executors or [Executor(e) for e in ("1", "2", "3")]
    return ClientState.observe(executors, dict.fromkeys(tasks, END), held, previous or {}, acceptable_recovery_lag=10)


def test_tasks_are_grouped_by_subtopology_and_an_odd_id_is_a_group_of_its_own() -> None:
    tasks = AppTasks.of(["1_0", "0_1", "0_0", "x"], ["0_0", "0_1", "x", "9_9"])
    assert tasks.ordered == ("0_0", "0_1", "1_0", "x")
    assert tasks.stateful == {"0_0", "0_1", "x"}
    assert list(tasks.groups.values()) == [("0_0", "0_1"), ("x",)]
    assert TaskGroup.of("x") != TaskGroup.of("y")


def test_an_active_goes_to_its_target_only_once_the_target_has_caught_up() -> None:
    state = clients({"1": {"0_0": END}, "2": {"0_0": 500}}, {"0_0": TaskAssignment("1")})
    assert actual_actives({"0_0": "2"}, state) == {"0_0": "1"}
    caught_up = clients({"1": {"0_0": END}, "2": {"0_0": END - 5}}, {"0_0": TaskAssignment("1")})
    assert actual_actives({"0_0": "2"}, caught_up) == {"0_0": "2"}


def test_with_no_copy_caught_up_the_freshest_copy_takes_the_active() -> None:
    state = clients({"1": {"0_0": 100}, "3": {"0_0": 900}})
    assert actual_actives({"0_0": "2"}, state) == {"0_0": "3"}


def test_warmups_keep_to_the_budget_those_under_way_first_then_actives_then_standbys() -> None:
    tasks = ("0_0", "0_1", "0_2")
    state = clients({}, {"0_2": TaskAssignment("1", (), ("3",))}, tasks=tasks)
    moves = [PlannedMove("0_0", "2", Role.STANDBY), PlannedMove("0_1", "2", Role.ACTIVE),
             PlannedMove("0_2", "3", Role.STANDBY)]
    warmups = place_warmups(moves, {"0_0": "1", "0_1": "1", "0_2": "1"}, {}, state, max_warmup_replicas=2)
    assert warmups == {"0_2": ["3"], "0_1": ["2"]}


def test_a_stateless_task_fills_up_the_executor_least_loaded_per_core_then_per_subtopology() -> None:
    executors = [Executor("1", cores=1), Executor("2", cores=2)]
    state = clients({}, executors=executors, tasks=("0_0", "1_0", "1_1"))
    tasks = AppTasks.of(["0_0", "1_0", "1_1"], ["0_0"])
    # 1_0: either executor would then hold one task per core; per sub-topology, executor 2's two
    # cores make it the lighter. 1_1: executor 1 now holds fewer tasks per core in total.
    assert place_stateless(tasks, state, {"0_0": "2"}) == {"1_0": "2", "1_1": "1"}


def test_a_standby_goes_to_a_zone_its_active_does_not_use() -> None:
    executors = [Executor("1", zone="a"), Executor("2", zone="a"), Executor("3", zone="b")]
    held = {e.id: {"0_0": END} for e in executors}
    state = clients(held, executors=executors)
    placed = place_standbys(AppTasks.of(["0_0"], ["0_0"]), state, {"0_0": "1"}, {"0_0": "1"}, standby_replicas=1)
    assert placed.standbys == {"0_0": ["3"]} and placed.moves == []


def test_a_standby_that_would_restore_gives_way_to_a_caught_up_copy_and_becomes_a_planned_move() -> None:
    held = {"1": {"0_0": END}, "2": {"0_0": END}}
    executors = [Executor(e) for e in ("1", "2", "3")]
    # executor 2 holds another task's active, so 0_0's standby belongs on executor 3, which holds nothing
    state = ClientState.observe(executors, {"0_0": END, "0_1": END}, held, {}, acceptable_recovery_lag=10)
    tasks = AppTasks.of(["0_0", "0_1"], ["0_0", "0_1"])
    placed = place_standbys(tasks, state, {"0_0": "1", "0_1": "2"}, {"0_0": "1", "0_1": "2"}, standby_replicas=1)
    assert placed.standbys["0_0"] == ["2"]
    assert placed.moves == [PlannedMove("0_0", "3", Role.STANDBY)]
