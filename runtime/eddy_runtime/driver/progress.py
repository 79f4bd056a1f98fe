"""Restore progress of every task copy -- actives restoring, standbys and warmups tailing their
changelogs -- kept by the driver across batches from its work items' results, and published on
the runtime-state channel (`eddy_contract.channel.RestoreProgress`) for the StreamApp's status."""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass

from eddy_contract.assignor import Assignment, TaskAssignment
from eddy_runtime.protocol.work import ItemResult

__all__ = ["CopyProgress", "CopyProgressTracker"]


@dataclass(frozen=True)
class CopyProgress:
    """One copy catching up: `restored` records so far, `remaining` changelog offsets to go."""

    task: str
    executor: str
    role: str  # "active", "standby" or "warmup"
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
            if r.role == "active" and r.status == "restoring":
                self._copies[key] = CopyProgress(r.task, r.executor, "active", r.restored, r.restore_remaining)
            elif r.role == "active" and r.status == "processed":
                self._copies.pop(key, None)
            elif r.status == "standby":
                role = "warmup" if r.executor in placement.warmups else "standby"
                self._copies[key] = CopyProgress(r.task, r.executor, role, r.restored, r.restore_remaining)
        for key, c in list(self._copies.items()):
            placement = assignment.tasks.get(c.task)
            moved = c.executor not in live or placement is None or not _still_there(c, placement)
            caught_up = complete and c.role != "active" and key not in seen
            if moved or caught_up:
                del self._copies[key]

    def in_progress(self) -> tuple[CopyProgress, ...]:
        """Copies with changelog offsets left to restore, by task and executor."""
        return tuple(sorted((c for c in self._copies.values() if c.remaining > 0),
                            key=lambda c: (c.task, c.executor)))


def _still_there(copy: CopyProgress, placement: TaskAssignment) -> bool:
    if copy.role == "active":
        return placement.active == copy.executor
    return copy.executor in placement.standbys or copy.executor in placement.warmups
