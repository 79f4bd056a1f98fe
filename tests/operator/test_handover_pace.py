"""Actives leave a departing executor a few at a time (eddy_operator.handover_pace): at most
PER_STEP moves off departing executors per generation, the next once the runtime runs the last one
with no active restoring (or its time is up); every other change of a generation goes at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest

from eddy_contract import channel
from eddy_contract.assignor import Assignment, AssignorSettings, Executor, TaskAssignment, assign_app
from eddy_operator.handover_pace import PER_STEP, STEP_TIMEOUT_S, paced, settled

pytestmark = pytest.mark.unit


def _assignment(generation: int, **tasks: TaskAssignment) -> Assignment:
    return Assignment(generation, MappingProxyType(tasks))


def _a(active: str, *standbys: str) -> TaskAssignment:
    return TaskAssignment(active, tuple(standbys))


def test_a_departing_executor_s_actives_leave_per_step_at_a_time_until_it_holds_none() -> None:
    """The assignor (rule 5) empties departing executor 2 in one generation; paced, it takes
    ceil(actives / PER_STEP) generations, each a valid placement, every task always on a live copy."""
    executors = [Executor("1"), Executor("2")]
    tasks = {f"0_{p}": 0 for p in range(4)} | {f"1_{p}": 100 for p in range(4)}
    stateful = [t for t in tasks if t.startswith("1_")]
    held = {e: dict.fromkeys(stateful, 100) for e in ("1", "2")}
    settings = AssignorSettings(standby_replicas=1)
    previous = assign_app(executors, tasks, held, None, settings, stateful)
    on_2 = sorted(t for t, a in previous.tasks.items() if a.active == "2")
    assert len(on_2) > PER_STEP
    steps = 0
    while any(a.active == "2" for a in previous.tasks.values()):
        new = paced(assign_app(executors, tasks, held, previous, settings, stateful, leaving=["2"]), previous,
                    ["2"], {"1", "2"}, settled=True)
        assert new.generation == previous.generation + 1
        moved = [t for t in on_2 if previous.tasks[t].active == "2" and new.tasks[t].active != "2"]
        assert 0 < len(moved) <= PER_STEP
        for a in new.tasks.values():
            copies = (a.active, *a.standbys, *a.warmups)
            assert len(set(copies)) == len(copies)
        previous, steps = new, steps + 1
    assert steps == -(-len(on_2) // PER_STEP)


def test_nothing_leaves_until_the_last_step_is_run() -> None:
    previous = _assignment(4, **{"0_0": _a("2", "1"), "0_1": _a("2", "1")})
    new = _assignment(5, **{"0_0": _a("1"), "0_1": _a("1")})
    assert paced(new, previous, ["2"], {"1", "2"}, settled=False) is previous
    assert paced(new, previous, ["2"], {"1", "2"}, settled=True) is new  # PER_STEP = 2: both go


def test_only_moves_off_departing_executors_wait() -> None:
    """Executor 3 is lost: its task fails over at once; a warmup placed for a later move stays."""
    previous = _assignment(4, **{"0_0": _a("2", "1"), "0_1": _a("3", "1"), "0_2": _a("1", "2")})
    new = _assignment(5, **{"0_0": _a("1"), "0_1": _a("1"), "0_2": TaskAssignment("1", (), ("4",))})
    out = paced(new, previous, ["2"], {"1", "2", "4"}, settled=False)
    assert out.generation == 5
    assert dict(out.tasks) == {"0_0": _a("2", "1"), "0_1": _a("1"), "0_2": TaskAssignment("1", (), ("4",))}


def test_a_placement_that_is_not_live_any_more_is_not_kept() -> None:
    previous = _assignment(4, **{"0_0": _a("2", "3")})
    new = _assignment(5, **{"0_0": _a("1")})
    assert paced(new, previous, ["2"], {"1", "2"}, settled=False) is new


def _runtime(generation: int | None, *restoring: tuple[str, str]) -> channel.RuntimeState:
    return channel.RuntimeState("wc", "2026-11-30T12:00:00.000Z", generation, {},
                                restores=tuple(channel.RestoreProgress(t, "1", role, 5, 10) for t, role in restoring))


def test_the_next_step_goes_once_the_runtime_runs_the_last_with_no_active_restoring_or_its_time_is_up() -> None:
    issued = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    message = channel.AssignmentMessage("wc", _assignment(5), (), issued.strftime("%Y-%m-%dT%H:%M:%S.000Z"))
    soon, late = issued + timedelta(seconds=1), issued + timedelta(seconds=STEP_TIMEOUT_S)
    assert settled(message, _runtime(5), soon)
    assert settled(message, _runtime(5, ("1_0", "standby")), soon)
    assert not settled(message, _runtime(5, ("1_0", "active")), soon)
    assert not settled(message, _runtime(4), soon)
    assert settled(message, _runtime(4), late)
    assert settled(None, _runtime(None), soon)
