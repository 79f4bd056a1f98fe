"""Restore progress of every task copy -- actives restoring, standbys and warmups tailing their
changelogs -- kept by the driver across batches from its work items' results, and published on
the runtime-state channel (`eddy_contract.channel.RestoreProgress`) for the StreamApp's status."""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass
from enum import StrEnum

from eddy_contract.assignor import Assignment, TaskAssignment
from eddy_contract.tasks import Role
from eddy_runtime.protocol.work import ItemResult, ItemStatus

__all__ = ["CopyProgress", "CopyProgressTracker", "CopyRole"]


class CopyRole(StrEnum):
    """What a copy catching up is, as the StreamApp's status shows it."""

    ACTIVE = "active"
    STANDBY = "standby"
    #: a standby the assignor placed to take the active over once caught up
    WARMUP = "warmup"


@dataclass(frozen=True)
class CopyProgress:
    """One copy catching up: `restored` records so far, `remaining` changelog offsets to go."""

    task: str
    executor: str
    role: CopyRole
    restored: int
    remaining: int


class CopyProgressTracker:
    """What each copy last said about its restore; forgets copies that caught up or moved."""

    def __init__(self) -> None:
        self._copies: dict[tuple[str, str], CopyProgress] = {}

    def update(self, results: Iterable[ItemResult], assignment: Assignment, live: Set[str], complete: bool) -> None:
        """Take a batch's results. `complete`: the batch ran (not cancelled or failed), so a
        standby or warmup without an item is one the driver found caught up."""
        seen: set[tuple[str, str]] = set()
        for r in results:
            placement = assignment.tasks.get(r.task)
            if placement is None:
                continue
            key = (r.task, r.executor)
            seen.add(key)
            if r.role == Role.ACTIVE and r.status == ItemStatus.RESTORING:
                self._copies[key] = CopyProgress(r.task, r.executor, CopyRole.ACTIVE, r.restored, r.restore_remaining)
            elif r.role == Role.ACTIVE and r.status == ItemStatus.PROCESSED:
                self._copies.pop(key, None)
            elif r.status == ItemStatus.STANDBY:
                role = CopyRole.WARMUP if r.executor in placement.warmups else CopyRole.STANDBY
                self._copies[key] = CopyProgress(r.task, r.executor, role, r.restored, r.restore_remaining)
        for key, c in list(self._copies.items()):
            placement = assignment.tasks.get(c.task)
            moved = c.executor not in live or placement is None or not _still_there(c, placement)
            caught_up = complete and c.role != CopyRole.ACTIVE and key not in seen
            if moved or caught_up:
                del self._copies[key]

    def in_progress(self) -> tuple[CopyProgress, ...]:
        """Copies with changelog offsets left to restore, by task and executor."""
        return tuple(sorted((c for c in self._copies.values() if c.remaining > 0),
                            key=lambda c: (c.task, c.executor)))


def _still_there(copy: CopyProgress, placement: TaskAssignment) -> bool:
    if copy.role == CopyRole.ACTIVE:
        return placement.active == copy.executor
    return copy.executor in placement.standbys or copy.executor in placement.warmups
