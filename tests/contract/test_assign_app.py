"""`assign_app`: stateful and stateless tasks are balanced apart; stateless tasks get no standbys."""

from __future__ import annotations

from collections import Counter

import pytest

from eddy_contract.assignor import AssignorSettings, Executor, assign_app

pytestmark = pytest.mark.unit

SETTINGS = AssignorSettings(standby_replicas=1, acceptable_recovery_lag=100, max_warmup_replicas=2)
STATEFUL = [f"1_{p}" for p in range(4)]
STATELESS = [f"0_{p}" for p in range(4)]


def _ends() -> dict[str, int]:
    return {**{t: 1000 for t in STATEFUL}, **{t: 0 for t in STATELESS}}


def test_stateless_tasks_get_no_standbys_and_stateful_ones_do() -> None:
    a = assign_app([Executor("0"), Executor("1")], _ends(), {}, None, SETTINGS, STATEFUL)
    assert all(len(a.tasks[t].standbys) == 1 for t in STATEFUL)
    assert all(a.tasks[t].standbys == () for t in STATELESS)
    assert a.generation == 1


def test_each_kind_of_task_is_balanced_across_executors_on_its_own() -> None:
    a = assign_app([Executor("0"), Executor("1")], _ends(), {}, None, SETTINGS, STATEFUL)
    assert Counter(a.tasks[t].active for t in STATEFUL) == {"0": 2, "1": 2}
    assert Counter(a.tasks[t].active for t in STATELESS) == {"0": 2, "1": 2}


def test_a_stateful_task_returns_to_a_rejoined_executor_once_it_has_caught_up() -> None:
    # Executor 1 was lost: everything runs on 0. It comes back holding caught-up copies.
    alone = assign_app([Executor("0")], _ends(), {"0": {t: 1000 for t in STATEFUL}}, None, SETTINGS, STATEFUL)
    held = {"0": {t: 1000 for t in STATEFUL}, "1": {t: 1000 for t in STATEFUL}}
    after = assign_app([Executor("0"), Executor("1")], _ends(), held, alone, SETTINGS, STATEFUL)
    assert Counter(after.tasks[t].active for t in STATEFUL) == {"0": 2, "1": 2}
    assert after.generation == alone.generation + 1


def test_nothing_changed_keeps_the_same_assignment_and_generation() -> None:
    executors = [Executor("0"), Executor("1")]
    first = assign_app(executors, _ends(), {}, None, SETTINGS, STATEFUL)
    held = {e: {t: 1000 for t in STATEFUL if e in first.tasks[t].copies} for e in ("0", "1")}
    again = assign_app(executors, _ends(), held, first, SETTINGS, STATEFUL)
    assert again is first
