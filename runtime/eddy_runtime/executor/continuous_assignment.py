"""The continuous tasks the driver gives one runner, and what came of them (Kafka Streams'
``handleAssignment`` / ``handleRevocation``, for the continuous path).

`ContinuousAssignment` takes each generation's `ContinuousWork` (a sync, or a push ahead of it),
lets tasks go ahead of a generation that takes them away (`release`), tracks which tasks a step or
round may still commit, and gathers what the loop did per task until the next sync. The loop that
runs the tasks is executor/continuous.py.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

from eddy_contract.tasks import Role
from eddy_runtime.executor.results import merge_results
from eddy_runtime.protocol.work import BatchSettings, ContinuousWork, ItemResult

if TYPE_CHECKING:
    from eddy_runtime.dsl.subtopology import SubTopology

__all__ = ["ContinuousAssignment", "CurrentWork", "Release"]

log = logging.getLogger("eddy.continuous")

#: at most this long per restore chunk, so that the other tasks keep their commit cadence
RESTORE_CHUNK_S = 0.2
STANDBY_CHUNK_S = 0.1



@dataclass
class CommittingTasks:
    """The tasks a block may commit (`ContinuousAssignment.committing`), and whether it did so
    cleanly: a release waits for them, and is refused for tasks whose commit was not clean."""

    allowed: list[str]
    clean: bool = False


class CurrentWork(NamedTuple):
    """The generation the loop runs, its program and settings."""

    work: ContinuousWork
    subs: dict[int, SubTopology]
    settings: BatchSettings


class Release(Enum):
    """How a release of tasks ended (`ContinuousAssignment.release`)."""

    #: every step or round holding them ended, and each committed (or had nothing to commit)
    CLEAN = "clean"
    #: they all ended, but one of them did not commit cleanly
    UNCLEAN = "unclean"
    #: one still held them when the release's time was up: they were not let go of
    TIMED_OUT = "timed_out"


class ContinuousAssignment:
    """The driver's current continuous work for this runner; safe to use from any thread."""

    def __init__(self, on_new_generation: Callable[[], None]) -> None:
        """`on_new_generation` runs (under the lock) when a newer generation is taken."""
        self._on_new_generation = on_new_generation
        self._lock = threading.Lock()
        self._work: ContinuousWork | None = None
        self._subs: dict[int, SubTopology] = {}
        self._settings: BatchSettings | None = None
        self._results: dict[str, ItemResult] = {}
        #: task -> the generation it was released for: not processed under older work (`release`)
        self._released: dict[str, int] = {}
        #: the tasks in a step or round that may commit, and those whose last one did not commit
        #: cleanly; `_changed` (on `_lock`) wakes `release` when a step or round ends
        self._committing: Counter[str] = Counter()
        self._unclean: set[str] = set()
        self._changed = threading.Condition(self._lock)
        #: tasks no step or round of any generation runs, while the runner drops their copies (`paused`)
        self._paused: set[str] = set()

    def take_synced(self, subs: dict[int, SubTopology], settings: BatchSettings,
                    work: ContinuousWork) -> list[ItemResult]:
        """Take a sync's work (unless an older generation's); what the loop did since the last sync."""
        with self._lock:
            if self._work is None or work.generation >= self._work.generation:
                if self._work is None or work.generation > self._work.generation:
                    self._on_new_generation()
                # short restore and standby chunks: the other tasks keep their commit cadence
                self._work, self._subs = work, subs
                self._settings = replace(settings, restore_chunk_seconds=RESTORE_CHUNK_S,
                                         standby_chunk_seconds=STANDBY_CHUNK_S)
            return self._take_results()

    def take_pushed(self, work: ContinuousWork) -> bool:
        """Take a newer generation's work pushed ahead of its sync; False if it is not newer, or
        there was no sync yet (no program to run it with)."""
        with self._lock:
            if self._work is None or self._settings is None or work.generation <= self._work.generation:
                return False
            self._on_new_generation()
            self._work = work
        return True

    def take_results(self) -> list[ItemResult]:
        """What the loop did since the last sync, forgotten here."""
        with self._lock:
            return self._take_results()

    def _take_results(self) -> list[ItemResult]:
        results = list(self._results.values())
        self._results.clear()
        return results

    def add_results(self, work: ContinuousWork, results: Iterable[ItemResult]) -> None:
        """What a step or round under `work` did, kept for the next sync unless a newer
        generation came meanwhile."""
        with self._lock:
            if self._work is not None and self._work.generation == work.generation:
                for result in results:
                    self._results[result.task] = merge_results(self._results.get(result.task), result)

    def current(self) -> CurrentWork | None:
        """What the loop runs now (None before the first sync)."""
        with self._lock:
            work, subs, settings = self._work, self._subs, self._settings
        return None if work is None or settings is None else CurrentWork(work, subs, settings)

    def settings(self) -> BatchSettings | None:
        """The last sync's settings (None before the first)."""
        with self._lock:
            return self._settings

    def release(self, generation: int, tasks: Sequence[str], timeout_s: float) -> Release:
        """Let `tasks` go ahead of `generation`: no step or round under older work processes them
        from now on; waits (up to `timeout_s`) for the step or round that holds one to end."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            for task in tasks:
                self._released[task] = max(self._released.get(task, -1), generation)
                self._unclean.discard(task)
            while any(self._committing[t] for t in tasks):
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("generation %d: %s still committing after %.1fs; not released", generation,
                                sorted(t for t in tasks if self._committing[t]), timeout_s)
                    return Release.TIMED_OUT
                self._changed.wait(left)
            return Release.UNCLEAN if self._unclean.intersection(tasks) else Release.CLEAN

    @contextlib.contextmanager
    def paused(self, tasks: Collection[str], timeout_s: float) -> Iterator[None]:
        """No step or round (of any generation) runs `tasks` while the block runs (a state reset
        drops their copies, executor/task_runner.py); the block starts once the steps and rounds
        under way that hold one ended. TimeoutError if one still does after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._paused.update(tasks)
            while any(self._committing[t] for t in tasks):
                left = deadline - time.monotonic()
                if left <= 0:
                    self._paused.difference_update(tasks)
                    raise TimeoutError(f"{sorted(t for t in tasks if self._committing[t])} still committing "
                                       f"after {timeout_s}s")
                self._changed.wait(left)
        try:
            yield
        finally:
            with self._lock:
                self._paused.difference_update(tasks)

    def released_from(self, work: ContinuousWork) -> set[str]:
        """The actives of `work` released for a newer generation."""
        with self._lock:
            return {t for t, _ in work.tasks if self._held_back(work, t, Role.ACTIVE)}

    def _held_back(self, work: ContinuousWork, task: str, role: Role) -> bool:
        """Whether `task` (in `role`) was released for a newer generation than `work` (under `_lock`)."""
        return role == Role.ACTIVE and self._released.get(task, -1) > work.generation

    def _taken(self, work: ContinuousWork, task: str, role: Role) -> bool:
        """Whether a newer generation than `work` took `task` (in `role`) from this runner (under `_lock`)."""
        current = self._work
        return current is not None and current.generation != work.generation and (task, role) not in current.tasks

    @contextlib.contextmanager
    def committing(self, work: ContinuousWork, tasks: Sequence[str], role: Role) -> Iterator[CommittingTasks]:
        """The tasks of `tasks` that `work` may still run (neither taken away by a newer
        generation nor released), marked as committing until the block ends; the block sets
        `clean` once what it did committed cleanly (or had nothing to commit)."""
        with self._lock:
            allowed = [t for t in tasks if t not in self._paused and not self._held_back(work, t, role)
                       and not self._taken(work, t, role)]
            self._committing.update(allowed)
        committing = CommittingTasks(allowed)
        try:
            yield committing
        finally:
            with self._lock:
                self._committing.subtract(allowed)
                for t in allowed:
                    if self._committing[t] <= 0:
                        del self._committing[t]
                if not committing.clean:
                    self._unclean.update(allowed)
                self._changed.notify_all()
