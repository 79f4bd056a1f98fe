"""How far a task's restores (and standby tails) are: per store, per task, and summed since open.

`StoreChangelogReader` (restore.py) reports `RestoreProgress` per store and `TaskRestoreProgress`
per task after every chunk; `ProcessorStateManager` (manager.py) hands them to its caller and adds
them up in `RestoredRecords` for the task's figures (metrics.py). Metrics: docs/metrics.md; where
the progress goes: docs/DESIGN.md, "One micro-batch".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["RestoreProgress", "RestoredRecords", "TaskRestoreProgress"]


@dataclass(frozen=True)
class RestoreProgress:
    """One store's restore (or standby tail): where it is, how fast it goes."""

    store: str
    topic: str
    partition: int
    mode: str  # "batch", "tail" or "none" (nothing to restore)
    start_offset: int
    end_offset: int
    position: int
    restored: int  # records applied so far
    elapsed_s: float
    done: bool

    @property
    def remaining(self) -> int:
        """Offsets left to read: an upper bound on records (compaction and markers leave gaps)."""
        return max(0, self.end_offset - self.position)

    @property
    def rate(self) -> float:
        """Records per second since this restore started (wall clock, pauses included)."""
        return self.restored / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        if self.done or self.remaining == 0:
            return 0.0
        rate = self.rate
        return self.remaining / rate if rate > 0 else None


@dataclass(frozen=True)
class TaskRestoreProgress:
    """All stores of a task."""

    stores: tuple[RestoreProgress, ...]

    @property
    def done(self) -> bool:
        return all(p.done for p in self.stores)

    @property
    def restored(self) -> int:
        return sum(p.restored for p in self.stores)

    @property
    def remaining(self) -> int:
        return sum(p.remaining for p in self.stores)

    @property
    def rate(self) -> float:
        elapsed = max((p.elapsed_s for p in self.stores), default=0.0)
        return self.restored / elapsed if elapsed > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        if self.done:
            return 0.0
        rate = self.rate
        return self.remaining / rate if rate > 0 else None


class RestoredRecords:
    """Records each store restored since its task opened, over every restore and standby tail.

    Each restore plan's progress counts from 0 again; `restart` says a new one began.
    """

    def __init__(self, stores: Iterable[str]) -> None:
        self._total = {s: 0 for s in stores}
        self._counted = dict.fromkeys(self._total, 0)

    def restart(self, store: str | None = None) -> None:
        """A new plan for every store (or, after a wipe, for `store`) counts from 0."""
        for name in self._counted if store is None else (store,):
            self._counted[name] = 0

    def count(self, progress: TaskRestoreProgress) -> None:
        """Add what `progress` restored since the last count."""
        for p in progress.stores:
            prev = self._counted.get(p.store, 0)
            # Less than before: a new restore (re-plan, wipe) that started counting from 0.
            self._total[p.store] += p.restored - prev if p.restored >= prev else p.restored
            self._counted[p.store] = p.restored

    def total(self, store: str) -> int:
        return self._total.get(store, 0)
