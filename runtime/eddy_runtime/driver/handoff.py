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
import os
import secrets
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence, Set

from eddy_contract.assignor import Assignment
from eddy_contract.tasks import Role
from eddy_runtime.driver.batch_plan import continuous_copies
from eddy_runtime.dsl.subtopology import CompiledApp
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.protocol.fences import FenceBook, runner_key
from eddy_runtime.protocol.placement import ExecutorRef
from eddy_runtime.protocol.work import ContinuousWork, HandedPositions, StateReset
from eddy_runtime.protocol.work_push import push_work, release_tasks

__all__ = ["PUSH_TOKEN_ENV", "RELEASE_TIMEOUT_S", "GenerationHandoff", "handed_over", "runners_to_ask"]

log = logging.getLogger("eddy.driver")

#: how long a live runner has to let go of the continuous actives a generation takes from it
#: before it is fenced instead (protocol/fences.py; at least 5 commit intervals)
RELEASE_TIMEOUT_S = 3.0
#: the push token, the same for every driver of the app (on Kubernetes from a Secret the operator
#: makes), so that a new driver can ask the runners of an earlier one to let go; random without it
PUSH_TOKEN_ENV = "EDDY_PUSH_TOKEN"


def runners_to_ask(runner_key: Callable[[str], str], gone: Set[str], known: Iterable[str]) -> set[str]:
    """The runner keys that may be asked to let go of a task: those of the executors this driver
    `known` (registered with it, or named by the generation) that are not in `gone` (died, or
    dropped by the operator: the operator names every live executor, a leaving one too, so one it
    no longer names is dead or taken for dead). A runner outlives its executor's JVM, and the pod's
    next JVM, under a new executor id, is served by the same runner: asked. Any other runner that
    loses a task is fenced at once, without waiting for an answer that would not come: one of a
    dead executor, and one of an earlier driver that never registered with this one (its pod
    gone: a request to its address takes seconds to fail)."""
    return {runner_key(e) for e in known if e not in gone}


def handed_over(holders: Mapping[str, str],
                released: Mapping[str, HandedPositions]) -> dict[str, Mapping[TopicPartition, int]]:
    """The positions to hand to the next owners (`ContinuousWork.handed`): of what each runner
    that let go cleanly answered (`released`: runner key -> task -> positions), those of the
    tasks it held as active in this driver's last generation (`holders`: task -> runner key).
    Since then only it could commit them: every move went through a release or a fence. A runner
    of an earlier driver (asked before this driver's first generation) is not taken at its word:
    it may hold a task it was fenced out of while no driver ran, with the positions of then."""
    return {task: positions for runner, tasks in released.items() for task, positions in tasks.items()
            if holders.get(task) == runner}


class GenerationHandoff:
    """Pushes each new generation's continuous work to the runners, once, after fencing for it."""

    def __init__(self, app: str, kafka: KafkaClientConfig, commit_interval_s: float, gone: Callable[[], Set[str]],
                 per_executor_state_dirs: bool = True, runner_port: int | None = None) -> None:
        """`gone`: the executors the driver saw die or the operator dropped from its assignment
        (the assignment source's word, read at each generation): never asked to let go.
        `per_executor_state_dirs`: executors share a host (local mode), and runners are known by
        executor id; otherwise by host (protocol/fences.py's `runner_key`), and a runner no executor
        has answered from yet is reached on its host at `runner_port` (its pod's metrics port)."""
        self.app = app
        self.kafka = kafka
        self.commit_interval_s = commit_interval_s
        self._gone = gone
        #: executor -> where its runner serves pushes, syncs and interactive queries
        self.runner_addresses: dict[str, str] = {}
        #: what the runners require of a request over HTTP (sent to them in the batch settings)
        self.token = os.environ.get(PUSH_TOKEN_ENV) or secrets.token_urlsafe(18)
        self._per_executor = per_executor_state_dirs
        self._runner_port = runner_port
        #: executor -> its runner's key (dead executors' too: a fence names them)
        self._keys: dict[str, str] = {}
        #: the newest assignment pushed to the runners (it may be ahead of the driver's while a
        #: job runs: an executor died mid-batch, or the operator's new generation came)
        self.pushed: Assignment | None = None
        self._lock = threading.Lock()
        self._compiled: CompiledApp | None = None
        self._continuous: frozenset[int] = frozenset()
        #: exactly-once continuous: the runners' fences
        self._fences: FenceBook | None = None
        #: the state reset this driver carried out (driver/upgrade_gate.py), carried by all its work
        self.state_reset: StateReset | None = None
        #: the newest fenced generation, and what the runners that let go of its actives handed
        #: over: each task's input positions, for its next owner (`ContinuousWork.handed`)
        self._handed: tuple[int, dict[str, Mapping[TopicPartition, int]]] = (-1, {})

    def start(self, compiled: CompiledApp, continuous: frozenset[int], exactly_once: bool) -> None:
        """Know the app (`continuous`: the sub-topologies the runners run by themselves); under
        `exactly_once`, read the runners' fence epochs."""
        self._compiled = compiled
        self._continuous = continuous
        if continuous and exactly_once and self._fences is None:
            self._fences = FenceBook(self.kafka, self.app)
            self._fences.start()

    def fence_earlier_runners(self) -> list[str]:
        """A state reset: fence every runner the fence topic names (an earlier driver's) now, before
        any state is dropped, instead of asking them to let go before the first generation
        (protocol/fences.py's `FenceBook.fence_earlier`); the runner keys fenced. The caller knows
        the fence topic exists."""
        if self._fences is None:
            self._fences = FenceBook(self.kafka, self.app)
            self._fences.start()
        return self._fences.fence_earlier()

    def push(self, assignment: Assignment, live: Set[str]) -> None:
        """Push `assignment`'s continuous work to the runners of `live` (once per generation)."""
        with self._lock:
            if (not self._continuous or self._compiled is None
                    or (self.pushed is not None and assignment.generation <= self.pushed.generation)):
                return
            if unknown := self.unknown_hosts(assignment):
                # The operator's assignment may come before this driver's first batch learnt the
                # executors' hosts: without them each runner of an earlier driver would be taken to
                # lose every task (it is known by its host) and let them all go. The batch brings it.
                log.info("generation %d not pushed ahead of its batch: the hosts of executors %s not known yet",
                         assignment.generation, unknown)
                return
            try:
                self.fence(assignment)
            except Exception:  # noqa: BLE001 - nothing pushed; the next batch fences and sends it
                log.exception("fencing for generation %d failed; not pushed", assignment.generation)
                return
            self.pushed = assignment
        work = continuous_copies(self._compiled, assignment, live, self._continuous)
        push_work(self.runner_addresses, {e: self.continuous_work(assignment.generation, e, tasks)
                                          for e, tasks in work.items()}, self.app, self.token)

    def know_executors(self, live: Iterable[ExecutorRef]) -> None:
        """Learn the runner keys of `live` (their hosts may be new)."""
        for e in live:
            self._keys[e.id] = runner_key(e.id, e.host, self._per_executor)

    def unknown_hosts(self, assignment: Assignment) -> list[str]:
        """The executors of `assignment` whose runner keys (hosts) are not known yet (none where
        runners are known by executor id)."""
        return [] if self._per_executor else sorted(e for e in assignment.executors() if e not in self._keys)

    def runner_key(self, executor: str) -> str:
        return self._keys.get(executor, executor)

    def continuous_work(self, generation: int, executor: str, tasks: Iterable[tuple[str, Role]]) -> ContinuousWork:
        """What `executor`'s runner runs continuously in `generation`: `tasks`, with its runner
        key and fence epoch, and the positions handed over with the actives it gains."""
        key = self.runner_key(executor)
        epoch = self._fences.epochs().get(key, 0) if self._fences is not None else 0
        tasks = tuple(tasks)
        handed_for, handed = self._handed
        gains = ({t: handed[t] for t, role in tasks if role == Role.ACTIVE and t in handed}
                 if handed_for == generation else {})
        return ContinuousWork(generation, tasks, self.commit_interval_s, epoch, key, self.state_reset, gains)

    def fence(self, assignment: Assignment) -> None:
        """Exactly-once continuous: before any runner hears of `assignment`, the executors that
        lose a continuous active in it let it go, or have their runner transactions fenced
        (protocol/fences.py). A runner of an executor that died or that the operator dropped, and
        one of an earlier driver on a pod no executor of this driver registered from, is fenced at
        once (`runners_to_ask`): asking a dead one would only wait out the release timeout."""
        if self._fences is None or self._compiled is None:
            return
        if unknown := self.unknown_hosts(assignment):
            # a runner key would be the executor's id, and an earlier runner known by its host
            # would be asked to let go of the tasks the generation leaves it
            raise RuntimeError(f"generation {assignment.generation} names executors {unknown} whose hosts this "
                               "driver does not know yet")
        actives = {task: self.runner_key(placement.active) for sub in self._compiled.subtopologies
                   if sub.id in self._continuous
                   for task in sub.task_ids if (placement := assignment.tasks.get(task)) is not None}
        askable = runners_to_ask(self.runner_key, self._gone(), set(self._keys) | set(assignment.executors()))

        addresses = self._runner_addresses_by_key()  # not under the fences' lock, which `release` runs under

        handed: dict[str, Mapping[TopicPartition, int]] = {}
        holders = self._fences.holders()

        def release(losing: Mapping[str, Sequence[str]]) -> set[str]:
            asked = {k: tasks for k, tasks in losing.items() if k in askable and k in addresses}
            if not asked:
                return set()
            released = release_tasks(addresses, asked, self.app, self.token, assignment.generation,
                                     max(RELEASE_TIMEOUT_S, 5 * self.commit_interval_s))
            handed.update(handed_over(holders, released))
            return set(released)

        self._fences.before_generation(assignment.generation, actives, release)
        if handed:
            self._handed = (assignment.generation, handed)

    def forget_runners_except(self, live: Set[str]) -> None:
        """Forget the addresses of the runners of executors not in `live`."""
        for e in [e for e in self.runner_addresses if e not in live]:
            del self.runner_addresses[e]

    def _runner_addresses_by_key(self) -> dict[str, str]:
        """Where each runner serves, by runner key: what an executor of it answered from, or (keys
        that are hosts) its host at the runner port: a runner of an earlier driver."""
        out: dict[str, str] = {}
        if self._fences is not None and not self._per_executor and self._runner_port:
            out.update({k: f"{k}:{self._runner_port}" for k in self._fences.epochs()})
        out.update({self.runner_key(e): a for e, a in self.runner_addresses.items()})
        return out

    def close(self) -> None:
        if self._fences is not None:
            self._fences.close()
