"""What the driver knows of the executors' state volumes, and the `RuntimeState` it publishes for
the operator's assignor and status (docs/DESIGN.md, "The operator's part").

`Volumes` tracks, per live executor, the changelog offsets each task's stores hold there (from
inventories and from each batch's figures) and which actives are still restoring;
`probe_inventories` reads the volumes of executors new to the driver; `runtime_state` builds the
message `channel_io.write_runtime_state` publishes (with each executor's load, driver/executor_load.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from eddy_contract.channel import ExecutorInventory, RestoreProgress, RuntimeState
from eddy_contract.tasks import Role, TaskId
from eddy_runtime.driver.executor_load import ExecutorLoads
from eddy_runtime.driver.progress import CopyProgress
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.protocol.placement import BatchWatch, ExecutorRef, PinnedSlots, current_executor_id
from eddy_runtime.protocol.work import BatchSettings, ItemResult, ItemStatus
from eddy_runtime.state import TaskInventory, changelog_topic_name

if TYPE_CHECKING:
    from pyspark import SparkContext

    from eddy_runtime.dsl.subtopology import CompiledApp

__all__ = ["Volumes", "held_offsets", "probe_inventories", "runtime_state"]

log = logging.getLogger("eddy.driver")

#: how long reading the executors' state inventories may take before it is given up (placement
#: works without them, only less sticky)
PROBE_TIMEOUT_S = 30.0


def held_offsets(inventory: Iterable[TaskInventory]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Per task, the next changelog offset its volume holds: summed over stores, and per store."""
    totals: dict[str, int] = {}
    per_store: dict[str, dict[str, int]] = {}
    for t in inventory:
        stores = {s.name: s.changelog_offset + 1 for s in t.stores if s.changelog_offset is not None}
        if stores:
            totals[t.task_id] = sum(stores.values())
            per_store[t.task_id] = stores
    return totals, per_store


class Volumes:
    """Per executor, what its volume holds; per task, the executor whose active still restores."""

    def __init__(self) -> None:
        #: executor -> task -> next changelog offset held (summed over the task's stores)
        self.held: dict[str, dict[str, int]] = {}
        #: executor -> task -> store -> next changelog offset held
        self.held_stores: dict[str, dict[str, dict[str, int]]] = {}
        #: task -> the executor whose active reported "restoring" last
        self.restoring: dict[str, str] = {}

    def record_inventory(self, executor: str, inventory: Iterable[TaskInventory]) -> None:
        """Take in what a volume's checkpoints say. A checkpoint is written at most every
        checkpoint interval, so it may trail what the copy's last figures reported: an inventory
        never lowers a store's offset (an idle active would otherwise look behind its own
        changelog until its next commit). A task missing from the volume is forgotten."""
        totals, per_store = held_offsets(inventory)
        known = self.held_stores.get(executor, {})
        for task, stores in per_store.items():
            for store, offset in known.get(task, {}).items():
                if store in stores and offset > stores[store]:
                    stores[store] = offset
            totals[task] = sum(stores.values())
        self.held[executor], self.held_stores[executor] = totals, per_store

    def record_results(self, results: Iterable[ItemResult], live: Set[str]) -> None:
        """Take in a batch's figures and restore states; forget executors no longer alive."""
        for r in results:
            if r.figures is not None:
                stores = {s.store: s.changelog_offset + 1 for s in r.figures.stores if s.changelog_offset is not None}
                if stores:
                    self.held.setdefault(r.executor, {})[r.task] = sum(stores.values())
                    self.held_stores.setdefault(r.executor, {})[r.task] = stores
            if r.role == Role.ACTIVE:
                if r.status == ItemStatus.RESTORING:
                    self.restoring[r.task] = r.executor
                elif r.status == ItemStatus.PROCESSED:
                    self.restoring.pop(r.task, None)
        for e in list(self.held):
            if e not in live:
                del self.held[e]
                self.held_stores.pop(e, None)


def probe_inventories(sc: SparkContext, executors: Sequence[ExecutorRef],
                      settings: BatchSettings) -> list[tuple[str, tuple[TaskInventory, ...]]]:
    """(executor, what its volume holds) for each of `executors`, read on the executor itself."""
    app = settings.app

    def inventory(slot: int) -> Iterator[tuple[str, tuple[TaskInventory, ...]]]:
        from eddy_runtime.state import StateDirectory

        me = current_executor_id(settings.executor_hosts) or ""
        yield me, tuple(StateDirectory(settings.state_dir_for(me)).inventory(app))

    slots = PinnedSlots(sc, executors)
    with BatchWatch(sc, f"eddy-inventories-{time.monotonic_ns()}", [e.id for e in executors],
                    description="reading the executors' state inventories") as watch:
        # An executor that Spark still counts as alive may be gone (its pod replaced by a rolling
        # upgrade): its pinned task would wait for it until Spark's heartbeat timeout.
        timer = threading.Timer(PROBE_TIMEOUT_S, watch.cancel, [f"not done within {PROBE_TIMEOUT_S:.0f}s"])
        timer.start()
        try:
            return slots.run(inventory)
        finally:
            timer.cancel()


def runtime_state(compiled: CompiledApp, changelog_ends: Mapping[TopicPartition, int], volumes: Volumes,
                  live: Sequence[ExecutorRef], restores: Iterable[CopyProgress], lag: Mapping[str, int],
                  generation: int, batch_id: int, loads: ExecutorLoads | None = None) -> RuntimeState:
    """The runtime state for the operator: changelog ends per task and store, what each live
    executor's volume holds, restores under way, input lag, and each live executor's load since
    `loads` started counting."""
    app = compiled.app
    per_task = {
        task: {st.name: changelog_ends[TopicPartition(changelog_topic_name(app, st.name), TaskId.parse(task).partition)]
               for st in s.stores}
        for s in compiled.subtopologies for task in s.task_ids
    }
    executors = {e.id: ExecutorInventory(e.id, host=e.host, stores=volumes.held_stores.get(e.id, {})) for e in live}
    progress = tuple(RestoreProgress(c.task, c.executor, c.role, c.restored, c.restored + c.remaining)
                     for c in restores)
    return RuntimeState(app, datetime.now(UTC).isoformat(), generation, per_task, executors, progress, dict(lag),
                        batch_id, load=loads.of(executors) if loads is not None else {},
                        load_since=loads.since if loads is not None else None)
