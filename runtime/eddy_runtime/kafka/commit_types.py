"""What a commit takes and what it comes to: `CommitPart` (one task's share), `PlannedPositions`,
`KafkaCommit` (what Kafka acknowledged), and the failures `CommitFailed` (aborted, or its outcome
in Kafka unknown) and `TaskFenced` (another producer of the same transactional id took over).

Used by kafka/transactions.py; the executor's commit order (executor/commit.py) says what each
outcome means for a task's stores.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.kafka.record_collector import ChangelogBatches, OutputRecord

__all__ = ["CommitFailed", "CommitPart", "KafkaCommit", "PlannedPositions", "TaskFenced"]


class CommitFailed(RuntimeError):
    """The batch was not committed.

    `aborted`: the Kafka transaction was aborted, nothing of the batch is visible, and the
    batch can be processed again from the last committed input offsets. Otherwise the outcome
    in Kafka is unknown; the task's stores are checked against their changelogs before its next
    batch (executor/commit.py; `ProcessorStateManager.restored` turns False until the delta is
    restored).
    """

    def __init__(self, message: str, *, aborted: bool = False, fatal: bool = False) -> None:
        super().__init__(message)
        self.aborted = aborted
        self.fatal = fatal


class TaskFenced(CommitFailed):
    """Another instance of this task took over (same transactional.id); this one must stop."""


@dataclass(frozen=True)
class CommitPart:
    """One task's share of a commit: its changelog records, outputs and input positions."""

    tx: ChangelogBatches | None
    outputs: Iterable[OutputRecord]
    input_offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class PlannedPositions:
    """The input positions a round plans to commit (`to`), sent to the coordinators while its
    parts are processed, and where each started (`back`): a partition whose part is left out
    goes back there before the commit (`TaskCommitter.commit_parts`)."""

    to: Mapping[TopicPartition, int]
    back: Mapping[TopicPartition, int]

    def corrections(self, committed: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """What must be sent again when the parts taken commit `committed`: positions that differ
        from the plan, and the start of every planned partition that no part commits."""
        out = {tp: off for tp, off in committed.items() if self.to.get(tp) != off}
        out.update({tp: self.back[tp] for tp in self.to if tp not in committed})
        return out


@dataclass(frozen=True)
class KafkaCommit:
    """What Kafka acknowledged for a batch: each store's last changelog offset."""

    changelog_offsets: Mapping[str, int | None]
    input_offsets: Mapping[TopicPartition, int]
    outputs: int
    changelog_records: int
    started: float = field(default=0.0, repr=False)
