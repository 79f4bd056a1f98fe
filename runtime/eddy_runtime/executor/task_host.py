"""What the continuous loop (executor/continuous.py) needs of the task runner that hosts it
(`TaskHost`, which executor/task_runner.py's `TaskRunner` is), and one task's share of a round
(`RoundEntry`): the contract between the two, so that each reads without the other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from eddy_runtime.executor.busy_clock import BusyClock
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.kafka.records import RawRecords
from eddy_runtime.kafka.transactions import TaskCommitter
from eddy_runtime.protocol.work import BatchSettings, ItemResult, SlotWork, StateReset, WorkItem

if TYPE_CHECKING:
    import pyarrow as pa

    from eddy_runtime.dsl.subtopology import SubTopology
    from eddy_runtime.executor.metrics import ExecutorMetrics

__all__ = ["RoundEntry", "TaskHost"]


class RoundEntry(NamedTuple):
    """One task's share of a round: its item and its records (each from the task's position)."""

    item: WorkItem
    records: Sequence[RawRecords]


class TaskHost(Protocol):
    """What the loop needs of the task runner (task_runner.TaskRunner)."""

    executor_id: str
    metrics: ExecutorMetrics | None
    #: the runner's time processing input (an executor's load)
    busy: BusyClock

    def positions(self, task_id: str) -> Mapping[TopicPartition, int] | None:
        """A running active's input positions: None unless held open as an active, restored, with
        its committed positions read."""

    def run_item(self, subs: dict[int, SubTopology], settings: BatchSettings, slot: SlotWork, item: WorkItem,
                 data: pa.Table | None, records: Sequence[RawRecords] | None = None) -> ItemResult: ...

    def forget_positions(self, task_id: str) -> None:
        """Read the task's committed positions again before it processes more."""

    def release_task(self, task_id: str, why: str, recycle: bool = False) -> None:
        """Let go of a held task, closing it in the background (it is opened again, and restores
        its delta, if it comes back); `recycle` (its last round committed cleanly): a stateful
        one is kept open a while for a standby of it here to take its stores over."""

    def release_actives(self, why: str) -> list[str]:
        """`release_task` for every active held (the ids let go)."""

    def reset_state(self, reset: StateReset | None, settings: BatchSettings | None = None) -> None:
        """Drop the runner's copies of a state reset's stores, once per reset, before its work runs."""

    def run_round(self, subs: dict[int, SubTopology], settings: BatchSettings,
                  entries: Sequence[RoundEntry], committer: TaskCommitter
                  ) -> list[ItemResult]:
        """Process each entry's records and commit them all in one transaction of `committer`."""
