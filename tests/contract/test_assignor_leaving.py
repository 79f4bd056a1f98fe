"""Leaving executors (their node is drained, rule 5): they take no new copy, and hand each of
their actives over only to a caught-up copy, a warmup placed and caught up first where none is."""

from __future__ import annotations

import pytest

from eddy_contract.assignor import AssignorSettings, Executor, assign_app

pytestmark = pytest.mark.unit

SETTINGS = AssignorSettings(standby_replicas=1, acceptable_recovery_lag=100, max_warmup_replicas=2)
STATEFUL = [f"1_{p}" for p in range(4)]
STATELESS = [f"0_{p}" for p in range(2)]
END = 10_000
EXECUTORS = [Executor("a"), Executor("b"), Executor("c")]


def _ends() -> dict[str, int]:
    return {**{t: END for t in STATEFUL}, **{t: 0 for t in STATELESS}}


def _held(assignment, executors=("a", "b", "c")) -> dict[str, dict[str, int]]:  # type: ignore[no-untyped-def]
    """Every copy the assignment names is caught up (its executor holds the changelog's end)."""
    return {e: {t: END for t in STATEFUL if e in assignment.tasks[t].copies} for e in executors}


def _settled() -> object:
    first = assign_app(EXECUTORS, _ends(), {}, None, SETTINGS, STATEFUL)
    return assign_app(EXECUTORS, _ends(), _held(first), first, SETTINGS, STATEFUL)


def test_a_leaving_executor_hands_every_active_to_its_caught_up_standby_and_keeps_nothing() -> None:
    before = _settled()
    after = assign_app(EXECUTORS, _ends(), _held(before), before, SETTINGS, STATEFUL, leaving=["a"])
    for t, placed in after.tasks.items():
        assert "a" not in placed.copies, (t, placed)
    for t in STATEFUL:
        if before.tasks[t].active == "a":
            # the standby took it: a copy that was caught up
            assert after.tasks[t].active in before.tasks[t].standbys
        assert len(after.tasks[t].standbys) == 1


def test_an_active_with_no_warm_copy_elsewhere_stays_until_a_warmup_has_caught_up() -> None:
    no_standbys = AssignorSettings(standby_replicas=0, acceptable_recovery_lag=100, max_warmup_replicas=2)
    first = assign_app(EXECUTORS, _ends(), {}, None, no_standbys, STATEFUL)
    held = _held(first)
    first = assign_app(EXECUTORS, _ends(), held, first, no_standbys, STATEFUL)
    mine = [t for t in STATEFUL if first.tasks[t].active == "a"]
    assert mine
    draining = assign_app(EXECUTORS, _ends(), held, first, no_standbys, STATEFUL, leaving=["a"])
    for t in mine:
        assert draining.tasks[t].active == "a"
        (warm,) = draining.tasks[t].warmups
        assert warm != "a"
    # the warmups catch up: the actives go to them and "a" holds nothing
    warm_held = {e: dict(v) for e, v in held.items()}
    for t in mine:
        warm_held[draining.tasks[t].warmups[0]][t] = END - 50
    done = assign_app(EXECUTORS, _ends(), warm_held, draining, no_standbys, STATEFUL, leaving=["a"])
    for t in mine:
        assert done.tasks[t].active == draining.tasks[t].warmups[0]
    assert all("a" not in placed.copies for placed in done.tasks.values())


def test_stateless_actives_leave_at_once() -> None:
    before = _settled()
    after = assign_app(EXECUTORS, _ends(), _held(before), before, SETTINGS, STATEFUL, leaving=["b"])
    assert all(after.tasks[t].active != "b" for t in STATELESS)


def test_when_every_executor_is_leaving_none_is() -> None:
    before = _settled()
    after = assign_app(EXECUTORS, _ends(), _held(before), before, SETTINGS, STATEFUL, leaving=["a", "b", "c"])
    assert after is before


def test_a_drain_reaches_a_fixed_point() -> None:
    before = _settled()
    after = assign_app(EXECUTORS, _ends(), _held(before), before, SETTINGS, STATEFUL, leaving=["c"])
    again = assign_app(EXECUTORS, _ends(), _held(after), after, SETTINGS, STATEFUL, leaving=["c"])
    assert again is after
