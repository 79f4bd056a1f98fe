"""The driver's record of copies catching up, which the operator's status shows (pure)."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from eddy_contract.assignor import Assignment, TaskAssignment
from eddy_runtime.driver.progress import CopyProgress, CopyProgressTracker
from eddy_runtime.protocol.work import ItemResult

pytestmark = pytest.mark.unit


def _assignment(generation: int, **tasks: TaskAssignment) -> Assignment:
    return Assignment(generation, MappingProxyType(tasks))


def test_actives_standbys_and_warmups_catching_up_are_reported_until_they_caught_up_or_moved():
    a = _assignment(1, **{"1_0": TaskAssignment("1", ("2",), ("3",)), "1_1": TaskAssignment("2", ("1",))})
    tracker = CopyProgressTracker()
    tracker.update([
        ItemResult("1_0", "1", "active", "restoring", restored=400, restore_remaining=600),
        ItemResult("1_0", "2", "standby", "standby", restored=50, restore_remaining=10),
        ItemResult("1_0", "3", "standby", "standby", restored=900, restore_remaining=9100),
        ItemResult("1_1", "1", "standby", "standby", restored=0, restore_remaining=0),
    ], a, {"1", "2", "3"}, complete=True)
    assert tracker.in_progress() == (
        CopyProgress("1_0", "1", "active", 400, 600),
        CopyProgress("1_0", "2", "standby", 50, 10),
        CopyProgress("1_0", "3", "warmup", 900, 9100),
    )
    # A cancelled batch says nothing about the copies it did not reach.
    tracker.update([ItemResult("1_0", "1", "active", "restoring", restored=1000, restore_remaining=0)], a,
                   {"1", "2", "3"}, complete=False)
    assert [(c.executor, c.remaining) for c in tracker.in_progress()] == [("2", 10), ("3", 9100)]
    # The active processes; the standby got no item (the driver found it caught up); executor 3
    # is gone.
    tracker.update([ItemResult("1_0", "1", "active", "processed")], a, {"1", "2"}, complete=True)
    assert tracker.in_progress() == ()
    # A copy the new assignment moved away is forgotten.
    tracker.update([ItemResult("1_1", "1", "standby", "standby", restored=5, restore_remaining=7)], a, {"1", "2"},
                   complete=True)
    tracker.update([], _assignment(2, **{"1_1": TaskAssignment("2", ("3",))}), {"1", "2"}, complete=False)
    assert tracker.in_progress() == ()
