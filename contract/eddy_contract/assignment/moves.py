"""What changed between two generations of an assignment, task by task: the operator's Events
and the driver's logs say it in these words."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from eddy_contract.assignment.model import Assignment
from eddy_contract.tasks import task_sort_key


class MoveKind(StrEnum):
    PROMOTED = "promoted"  # a standby or warmup became the active
    MOVED = "moved"  # the active went to an executor that held no copy
    ASSIGNED = "assigned"  # a new task
    STANDBY_ADDED = "standby-added"
    STANDBY_REMOVED = "standby-removed"
    WARMUP_ADDED = "warmup-added"
    WARMUP_REMOVED = "warmup-removed"
    REMOVED = "removed"  # the task no longer exists


@dataclass(frozen=True)
class TaskMove:
    """One change between two generations, for events and logs: `source` is the executor a copy
    left (None if it is new), `target` the one it went to (None if it is gone)."""

    task: str
    kind: MoveKind
    source: str | None
    target: str | None


def diff(previous: Assignment | None, current: Assignment) -> tuple[TaskMove, ...]:
    """What changed from `previous` to `current`, task by task in task order."""
    moves: list[TaskMove] = []
    before = dict(previous.tasks) if previous is not None else {}
    for task in sorted(set(before) | set(current.tasks), key=task_sort_key):
        old, new = before.get(task), current.tasks.get(task)
        if new is None:
            assert old is not None
            moves.append(TaskMove(task, MoveKind.REMOVED, old.active, None))
            continue
        if old is None:
            moves.append(TaskMove(task, MoveKind.ASSIGNED, None, new.active))
        elif old.active != new.active:
            promoted = new.active in old.standbys or new.active in old.warmups
            moves.append(TaskMove(task, MoveKind.PROMOTED if promoted else MoveKind.MOVED, old.active, new.active))
        old_standbys = set(old.standbys) if old else set()
        old_warmups = set(old.warmups) if old else set()
        for e in sorted(set(new.standbys) - old_standbys):
            moves.append(TaskMove(task, MoveKind.STANDBY_ADDED, None, e))
        for e in sorted(old_standbys - set(new.standbys) - {new.active}):
            moves.append(TaskMove(task, MoveKind.STANDBY_REMOVED, e, None))
        for e in sorted(set(new.warmups) - old_warmups):
            moves.append(TaskMove(task, MoveKind.WARMUP_ADDED, None, e))
        for e in sorted(old_warmups - set(new.warmups) - {new.active} - set(new.standbys)):
            moves.append(TaskMove(task, MoveKind.WARMUP_REMOVED, e, None))
    return tuple(moves)
