"""Handing a new assignment generation to the executors' runners over HTTP, ahead of the Spark job
that carries it (protocol/work_push.py): fence first, then push.

Under exactly-once, before any runner hears of a generation, the executors that lose a
continuous active in it are asked to let it go, and those that do not answer in time have their
runner transactions fenced (protocol/fences.py). `GenerationHandoff` does that once per generation,
whichever comes first: the batch that plans it, an executor lost mid-batch, or the operator's new
assignment (driver/assignment_source.py).
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Mapping, Sequence, Set

from eddy_contract.assignor import Assignment
from eddy_runtime.driver.batch_plan import continuous_copies
from eddy_runtime.dsl.subtopology import CompiledApp
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.protocol.fences import FenceBook
from eddy_runtime.protocol.work import ContinuousWork
from eddy_runtime.protocol.work_push import push_work, release_tasks

__all__ = ["RELEASE_TIMEOUT_S", "GenerationHandoff"]

log = logging.getLogger("eddy.driver")

#: how long a live runner has to let go of the continuous actives a generation takes from it
#: before it is fenced instead (protocol/fences.py; at least 5 commit intervals)
RELEASE_TIMEOUT_S = 3.0


class GenerationHandoff:
    """Pushes each new generation's continuous work to the runners, once, after fencing for it."""

    def __init__(self, app: str, kafka: KafkaClientConfig, commit_interval_s: float, lost: Set[str]) -> None:
        self.app = app
        self.kafka = kafka
        self.commit_interval_s = commit_interval_s
        #: the executors the driver saw die (kept up to date by the assignment source): never asked to let go
        self._lost = lost
        #: executor -> where its runner serves pushes, syncs and interactive queries
        self.runner_addresses: dict[str, str] = {}
        #: what the runners require of a request over HTTP (sent to them in the batch settings)
        self.token = secrets.token_urlsafe(18)
        #: the newest assignment pushed to the runners (it may be ahead of the driver's while a
        #: job runs: an executor died mid-batch, or the operator's new generation came)
        self.pushed: Assignment | None = None
        self._lock = threading.Lock()
        self._compiled: CompiledApp | None = None
        self._continuous: frozenset[int] = frozenset()
        #: exactly-once continuous: the runners' fences
        self._fences: FenceBook | None = None

    def start(self, compiled: CompiledApp, continuous: frozenset[int], exactly_once: bool) -> None:
        """Know the app (`continuous`: the sub-topologies the runners run by themselves); under
        `exactly_once`, read the runners' fence epochs."""
        self._compiled = compiled
        self._continuous = continuous
        if continuous and exactly_once and self._fences is None:
            self._fences = FenceBook(self.kafka, self.app)
            self._fences.start()

    def push(self, assignment: Assignment, live: Set[str]) -> None:
        """Push `assignment`'s continuous work to the runners of `live` (once per generation)."""
        with self._lock:
            if (not self._continuous or self._compiled is None
                    or (self.pushed is not None and assignment.generation <= self.pushed.generation)):
                return
            try:
                self.fence(assignment)
            except Exception:  # noqa: BLE001 - nothing pushed; the next batch fences and sends it
                log.exception("fencing for generation %d failed; not pushed", assignment.generation)
                return
            self.pushed = assignment
        work = continuous_copies(self._compiled, assignment, live, self._continuous)
        epochs = self.fence_epochs()
        push_work(self.runner_addresses,
                  {e: ContinuousWork(assignment.generation, tuple(tasks), self.commit_interval_s, epochs.get(e, 0))
                   for e, tasks in work.items()}, self.app, self.token)

    def fence(self, assignment: Assignment) -> None:
        """Exactly-once continuous: before any runner hears of `assignment`, the executors that
        lose a continuous active in it let it go, or have their runner transactions fenced
        (protocol/fences.py); only an executor that `assignment` still names is asked to let go."""
        if self._fences is None or self._compiled is None:
            return
        actives = {task: placement.active for sub in self._compiled.subtopologies if sub.id in self._continuous
                   for task in sub.task_ids if (placement := assignment.tasks.get(task)) is not None}
        named = set(assignment.executors()) - self._lost

        def release(losing: Mapping[str, Sequence[str]]) -> set[str]:
            asked = {e: tasks for e, tasks in losing.items() if e in named}
            if not asked:
                return set()
            return release_tasks(self.runner_addresses, asked, self.app, self.token, assignment.generation,
                                 max(RELEASE_TIMEOUT_S, 5 * self.commit_interval_s))

        self._fences.before_generation(assignment.generation, actives, release)

    def forget_runners_except(self, live: Set[str]) -> None:
        """Forget the addresses of the runners of executors not in `live`."""
        for e in [e for e in self.runner_addresses if e not in live]:
            del self.runner_addresses[e]

    def fence_epochs(self) -> dict[str, int]:
        """Each executor's fence epoch, as every generation's work carries it (protocol/fences.py)."""
        return self._fences.epochs() if self._fences is not None else {}

    def close(self) -> None:
        if self._fences is not None:
            self._fences.close()
