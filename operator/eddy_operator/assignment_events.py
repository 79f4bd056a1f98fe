"""The Kubernetes Events that tell a new assignment generation's changes: one per active that
moved or was promoted, one per kind for placed and removed tasks, standbys and warmups."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from eddy_contract.assignor import MoveKind, TaskMove


class MoveEvent(NamedTuple):
    """One Event to post: its reason (a CamelCase word) and message."""

    reason: str
    message: str


# More items than this in one Event are counted, not listed.
_LISTED = 40


def describe_moves(moves: Iterable[TaskMove], pods_by_id: Mapping[str, str]) -> list[MoveEvent]:
    """The Events of one new generation: one per active move, one per kind for standby and warmup
    placement. `pods_by_id`: each live executor's pod, named beside it."""

    def who(e: str | None) -> str:
        return f"executor {e} ({pods_by_id[e]})" if e is not None and e in pods_by_id else f"executor {e}"

    events: list[MoveEvent] = []
    grouped: dict[str, list[str]] = {}
    for m in moves:
        if m.kind == MoveKind.PROMOTED:
            events.append(MoveEvent(
                "TaskPromoted",
                f"task {m.task}: standby on {who(m.target)} promoted to active, was on {who(m.source)}",
            ))
        elif m.kind == MoveKind.MOVED:
            events.append(MoveEvent(
                "TaskMoved", f"task {m.task}: active moved from {who(m.source)} to {who(m.target)}"))
        elif m.kind == MoveKind.ASSIGNED:
            grouped.setdefault("TasksAssigned", []).append(f"{m.task}@{m.target}")
        elif m.kind in (MoveKind.STANDBY_ADDED, MoveKind.WARMUP_ADDED):
            key = "StandbysPlaced" if m.kind == MoveKind.STANDBY_ADDED else "WarmupsPlaced"
            grouped.setdefault(key, []).append(f"{m.task}@{m.target}")
        elif m.kind in (MoveKind.STANDBY_REMOVED, MoveKind.WARMUP_REMOVED):
            grouped.setdefault("ReplicasRemoved", []).append(f"{m.task}@{m.source}")
        elif m.kind == MoveKind.REMOVED:
            grouped.setdefault("TasksRemoved", []).append(m.task)
    for reason, items in grouped.items():
        shown = ", ".join(items[:_LISTED]) + (f" and {len(items) - _LISTED} more" if len(items) > _LISTED else "")
        events.append(MoveEvent(reason, f"{len(items)}: {shown}"))
    return events
