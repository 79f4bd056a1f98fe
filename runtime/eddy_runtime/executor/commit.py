"""The commit order of an active task's batch, written once (as Quix Streams' ``Checkpoint.commit``).

Kafka first, then the stores:

1. Kafka: the batch's output records, changelog records and input positions go out through a
   committer (`TaskCommitter.commit_to_kafka`; for a round of a runner's continuous tasks under
   exactly-once, `TaskCommitter.commit_parts` on the runner's producer, executor/producer.py).
   exactly_once: one transaction carries all three. at_least_once: produce and flush, then
   commit the input positions.
2. If step 1 failed, the stores are not written:
   - aborted (`CommitFailed.aborted`, or `TaskFenced`): nothing of the batch is visible in Kafka;
     the batch is processed again from the committed positions (a fenced task is closed: another
     producer owns its transactional id now);
   - any other `CommitFailed`: the outcome in Kafka is unknown; the stores are checked against
     their changelogs (`ProcessorStateManager.recheck_changelogs`), and the task is not
     `restored` until the delta is.
3. The stores: each store's write batch, with the changelog offsets Kafka gave and the input
   positions (`ProcessorStateManager.write_committed`), then the figures and a throttled
   checkpoint. A crash between 1 and 3 leaves the stores behind their changelogs; the next open
   restores exactly that delta, and the input positions were committed with the changelog
   records, so nothing is counted twice (under at_least_once a crash before the positions'
   commit processes the batch again).

`StateCommitter` pairs a task's `ProcessorStateManager` with the committer it commits through;
steps 1-2 are `commit_to_kafka`, step 3 `write_stores` (public, so tests can crash in between).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eddy_contract.spec import ProcessingGuarantee
from eddy_contract.tasks import Role
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.kafka.commit_types import CommitFailed, KafkaCommit
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.kafka.record_collector import OutputRecord
from eddy_runtime.kafka.transactions import TaskCommitter
from eddy_runtime.state import ProcessorStateManager, StoreSpec, TaskTransaction

__all__ = ["CommitResult", "StateCommitter", "after_failed_commit", "write_stores"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitResult:
    """What a committed batch wrote: each store's last changelog offset, the records, the latency."""

    changelog_offsets: Mapping[str, int | None]
    outputs: int
    changelog_records: int
    latency_s: float


def after_failed_commit(state: ProcessorStateManager, error: CommitFailed) -> None:
    """Step 2: a commit whose outcome in Kafka is unknown has the stores checked against their
    changelogs; an aborted (or fenced) one leaves them as they are."""
    if not error.aborted:
        state.recheck_changelogs()


def write_stores(state: ProcessorStateManager, tx: TaskTransaction | None, kc: KafkaCommit) -> CommitResult:
    """Step 3: write what Kafka committed to the stores (then figures and checkpoint)."""
    latency = state.write_committed(tx, kc)
    return CommitResult(kc.changelog_offsets, kc.outputs, kc.changelog_records, latency)


class StateCommitter:
    """A task's stores (`state`) and, while it is active, the `TaskCommitter` its batches go to
    Kafka through. Use `open`."""

    def __init__(self, new_committer: Callable[[], TaskCommitter]) -> None:
        self._new_committer = new_committer
        self.committer: TaskCommitter | None = None
        self._state: ProcessorStateManager | None = None

    @classmethod
    def open(
        cls,
        app: str,
        task_id: str,
        stores: Sequence[StoreSpec],
        state_dir: str | os.PathLike[str],
        kafka: KafkaClientConfig | str,
        *,
        role: Role = Role.ACTIVE,
        guarantee: ProcessingGuarantee = ProcessingGuarantee.EXACTLY_ONCE,
        partition: int | None = None,
        lock_timeout: float = 0.0,
        producer_overrides: Mapping[str, Any] | None = None,
        checkpoint_interval_s: float = 1.0,
        group_id: str | None = None,
        fence_task_producer: bool = True,
    ) -> StateCommitter:
        """Open the task's state (`ProcessorStateManager.open`); an active (or a standby once
        promoted) makes its committer *before* its changelogs' ends are read, so a zombie of the
        task is fenced and its open transaction aborted first. `producer_overrides` adjust the
        committer's producer settings. `fence_task_producer` False: the task commits through its
        runner's transactions (the continuous path under exactly-once), so its own committer only
        reads positions and fences nothing (`TaskCommitter`'s `fence`)."""
        kc = KafkaClientConfig.of(kafka)
        opened = cls(functools.partial(TaskCommitter, app, task_id, kc, guarantee, group_id=group_id,
                                       producer_overrides=producer_overrides, fence=fence_task_producer))
        try:
            opened._state = ProcessorStateManager.open(
                app, task_id, stores, state_dir, kc, role=role, partition=partition, lock_timeout=lock_timeout,
                checkpoint_interval_s=checkpoint_interval_s, on_active=opened._make_committer)
        except BaseException:
            opened._close_committer()
            raise
        return opened

    @property
    def state(self) -> ProcessorStateManager:
        assert self._state is not None, "StateCommitter.open sets the state"
        return self._state

    def _make_committer(self) -> None:
        if self.committer is None:
            self.committer = self._new_committer()

    def _active_committer(self) -> TaskCommitter:
        if self.committer is None or not self.state.restored:
            raise RuntimeError(f"app {self.state.app} task {self.state.task_id}: only a restored active commits")
        return self.committer

    def demote(self) -> None:
        """Active -> standby in place (`ProcessorStateManager.demote`): the committer closed
        first, so no producer of this copy commits from here on; a promotion makes a new one."""
        self._close_committer()
        self.state.demote()

    def committed_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed positions of the task's input partitions (`TaskCommitter`)."""
        if self.committer is None:
            raise RuntimeError(f"app {self.state.app} task {self.state.task_id}: a standby reads no positions")
        return self.committer.committed_offsets(partitions)

    def commit(self, tx: TaskTransaction | None, outputs: Iterable[OutputRecord] = (),
               input_offsets: Mapping[TopicPartition, int] | None = None, *,
               group_metadata: Any = None) -> CommitResult:
        """The batch committed in the order above: Kafka (steps 1-2), then the stores (step 3)."""
        kc = self.commit_to_kafka(tx, outputs, input_offsets, group_metadata=group_metadata)
        return write_stores(self.state, tx, kc)

    def commit_to_kafka(self, tx: TaskTransaction | None, outputs: Iterable[OutputRecord] = (),
                        input_offsets: Mapping[TopicPartition, int] | None = None, *,
                        group_metadata: Any = None) -> KafkaCommit:
        """Steps 1-2: the batch made durable in Kafka, or the failure handled and raised."""
        committer = self._active_committer()
        try:
            return committer.commit_to_kafka(tx, outputs, input_offsets, group_metadata=group_metadata)
        except CommitFailed as e:
            after_failed_commit(self.state, e)
            raise

    def write_stores(self, tx: TaskTransaction | None, kc: KafkaCommit) -> CommitResult:
        """Step 3 (`write_stores`)."""
        return write_stores(self.state, tx, kc)

    def __enter__(self) -> StateCommitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the committer (before the task directory's lock is released, so no producer of
        this copy outlives it), then the state: flush, checkpoint, release the lock."""
        try:
            self._close_committer()
        finally:
            if self._state is not None:
                self._state.close()

    def _close_committer(self) -> None:
        committer, self.committer = self.committer, None
        if committer is not None:
            try:
                committer.close()
            except Exception:  # noqa: BLE001 - the state closes either way
                log.exception("closing the committer of a task failed")
