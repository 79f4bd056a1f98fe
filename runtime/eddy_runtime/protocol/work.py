"""Work items the driver plans for one micro-batch, and the results executors send back.

The driver plans (driver/batch_plan.py, driver/spark_plan.py), per batch, one `SlotWork` per Spark partition:
either one task whose records go through DataFrame steps, or everything else one executor has to
do in this batch (direct processing, restore chunks, standby tails). Executors run them in their task
runner (executor/task_runner.py) and answer with one `ItemResult` per `WorkItem`. All of these are small,
picklable values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from eddy_contract.histograms import DURATION_BUCKETS_S
from eddy_contract.spec import BadRecordPolicy, ProcessingGuarantee
from eddy_contract.tasks import Role
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.kafka.partitions import InputRange, TopicPartition
from eddy_runtime.queries.routing import QueryRouting
from eddy_runtime.state import StateDirectory, TaskFigures, TaskInventory

__all__ = [
    "BadRecordInfo",
    "BatchSettings",
    "ContinuousWork",
    "ItemResult",
    "ItemStatus",
    "SlotWork",
    "StateReset",
    "WorkItem",
    "executor_state_dir",
    "volume_inventory",
    "LATENCY_BUCKETS_S",
]

class ItemStatus(StrEnum):
    """What became of one work item."""

    PROCESSED = "processed"  # committed (possibly an empty batch)
    RESTORING = "restoring"  # an active that restored a chunk instead of processing
    STANDBY = "standby"  # a standby that tailed its changelogs
    MISPLACED = "misplaced"  # reached another executor than planned: nothing touched
    LOCKED = "locked"  # another process holds the task directory
    FENCED = "fenced"  # another instance of the task took over
    ABORTED = "aborted"  # the Kafka transaction aborted; the range is processed again next batch
    BAD_RECORD = "bad-record"  # policy fail: stopped at a bad record (see `message`)
    FAILED = "failed"  # anything else (see `message`)


#: end-to-end latency buckets (seconds) for the histogram items report and the driver exports
LATENCY_BUCKETS_S: tuple[float, ...] = DURATION_BUCKETS_S


@dataclass(frozen=True)
class StateReset:
    """An upgrade's state reset (driver/upgrade_gate.py): the driver that carried it out deleted the
    changelogs of `stores` and made them anew, empty, before its first generation. Every work it
    hands out carries it; a runner drops its copies once per reset (`id`), before it runs anything
    of that work: it closes the tasks it holds with one of `stores` (standbys too) and deletes
    `stores` from every task directory of the app on its volume, so that each is rebuilt from the
    new changelog (executor/task_runner.py's `TaskRunner.reset_state`)."""

    #: one per driver that carried out a reset: a runner does each once
    id: str
    #: the stores whose state starts empty (the reset sub-topologies' and those the new version dropped)
    stores: tuple[str, ...]
    #: the new version's tasks that hold one of them: no step runs them while the runner drops its copies
    tasks: tuple[str, ...] = ()


@dataclass(frozen=True)
class BatchSettings:
    """What every work item of a batch shares."""

    app: str
    batch_id: int
    generation: int
    #: the app's Kafka without secrets: each client adds credentials from its own process's env
    kafka: KafkaClientConfig
    guarantee: ProcessingGuarantee
    bad_record_policy: BadRecordPolicy
    dead_letter_topic: str | None
    #: root of the state volume; each executor's stores live under `state_dir_for(executor)`
    state_dir: str
    #: local mode: one folder per executor under `state_dir` (executors share a disk)
    per_executor_state_dirs: bool
    #: host -> executor id of the live executors (`placement.executor_hosts`): how a Python
    #: worker learns its executor's id where Spark hands ids out at registration
    executor_hosts: Mapping[str, str] = field(default_factory=dict)
    restore_chunk_records: int = 500_000
    restore_chunk_seconds: float = 2.0
    standby_chunk_seconds: float = 1.0
    read_timeout_s: float = 30.0
    #: where each queryable store's keys live, for the runners' query endpoints (queries/server.py)
    routing: QueryRouting | None = None
    #: what a push of a new generation to the runners must carry (protocol/work_push.py); "" takes none
    push_token: str = ""
    #: spec.state.acceptableRecoveryLag: a runner is warm (its pod ready, executor/task_runner.py's
    #: `TaskRunner.warm`) once each copy it holds is at most this far behind
    acceptable_recovery_lag: int = 0
    #: the state reset of this driver's upgrade, if it carried one out (None: nothing reset)
    state_reset: StateReset | None = None

    def state_dir_for(self, executor: str) -> str:
        return executor_state_dir(self.state_dir, executor, self.per_executor_state_dirs)


def executor_state_dir(state_dir: str, executor: str, per_executor: bool) -> str:
    """Where `executor`'s stores (and its task runner) live under an app's `state_dir`: a folder
    of its own when executors share a disk (`per_executor`, local mode), else `state_dir` itself."""
    return f"{state_dir}/executor-{executor}" if per_executor else state_dir


#: task -> the input positions its last owner committed, handed over with it (`ContinuousWork.handed`)
HandedPositions = Mapping[str, Mapping[TopicPartition, int]]


class Released(NamedTuple):
    """How a runner let go of actives it was asked to release (executor/continuous.py's `release`)."""

    #: every round holding them ended and committed (or had nothing to commit): no fence needed
    clean: bool
    #: if clean, the input positions each of them committed last (one whose positions were not
    #: known, for example after a round that failed, is left out)
    positions: HandedPositions


@dataclass(frozen=True)
class WorkItem:
    """One task's share of a batch on one executor."""

    task: str
    role: Role
    #: actives: the source range first, then the joined table's range (if any)
    ranges: tuple[InputRange, ...] = ()
    #: the driver knows this active is still restoring: restore a chunk, do not read input
    restore_only: bool = False
    #: source offsets whose record made a DataFrame step fail (found by the driver), with the
    #: error: the read step leaves them out and hands them to the bad-record policy
    poison: tuple[tuple[int, str], ...] = ()
    #: an active opened here for the first time in its generation: the input positions its last
    #: owner committed and handed over when it let go of it (`ContinuousWork.handed`), taken
    #: instead of reading the group's committed offsets
    handed: Mapping[TopicPartition, int] | None = None


@dataclass(frozen=True)
class ContinuousWork:
    """What one executor runs continuously in one assignment generation (executor/continuous.py)."""

    generation: int
    tasks: tuple[tuple[str, Role], ...]
    commit_interval_s: float
    #: exactly-once: the runner's fence epoch as of this generation (protocol/fences.py)
    fence_epoch: int = 0
    #: the runner's key: what its transactional id and fence epoch are kept under (protocol/fences.py's
    #: `runner_key`); "" for the executor's id
    runner: str = ""
    #: the state reset of this driver's upgrade, if it carried one out (None: nothing reset)
    reset: StateReset | None = None
    #: actives of this generation that another runner let go of cleanly for it: the input
    #: positions it committed last, which the group's committed offsets hold too once its last
    #: transaction's markers are written (driver/handoff.py). A runner opening one of them takes
    #: these rather than waiting for those markers (a broker round trip or several, retried while
    #: the coordinator answers UNSTABLE_OFFSET_COMMIT)
    handed: HandedPositions = field(default_factory=dict)


@dataclass(frozen=True)
class SlotWork:
    """What one Spark partition does in a batch, on `executor`."""

    executor: str
    items: tuple[WorkItem, ...]
    #: executor slots only: every (task, role) this executor holds in this assignment, so that
    #: the runner closes what it no longer holds
    held: tuple[tuple[str, Role], ...] | None = None
    #: the task whose records flow through DataFrame steps into this slot (None: executor slot)
    dataframe_task: str | None = None
    #: executor slots only: report the volume's inventory (what each task's stores hold)
    inventory: bool = False
    #: executor slots only: what this executor runs continuously (executor/continuous.py), and what it did since
    continuous: ContinuousWork | None = None
    #: the continuous loop's own items under exactly-once: their tasks commit through the
    #: runner's transactions, so opening one fences no producer of its own (protocol/fences.py)
    runner_transactions: bool = False

    @property
    def idle(self) -> bool:
        return not self.items and self.held is None and not self.inventory and self.continuous is None


@dataclass(frozen=True)
class BadRecordInfo:
    """Where a bad record was and why (the record itself goes to the dead-letter topic)."""

    topic: str
    partition: int
    offset: int
    error: str

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}: {self.error}"


@dataclass(frozen=True)
class ItemResult:
    """What a work item did; the driver turns these into metrics, progress and the next plan."""

    task: str
    executor: str
    role: Role
    status: ItemStatus
    records_in: int = 0
    records_out: int = 0
    #: input positions committed by this item: partition -> next offset
    committed: Mapping[TopicPartition, int] = field(default_factory=dict)
    skipped: int = 0
    dead_lettered: int = 0
    #: records an aggregation ignores as Kafka Streams does (null keys, late for their window)
    dropped: int = 0
    bad_records: tuple[BadRecordInfo, ...] = ()
    #: end-to-end latency histogram: counts per LATENCY_BUCKETS_S bucket (+ one overflow), and sum
    latency_counts: tuple[int, ...] = ()
    latency_sum_s: float = 0.0
    duration_s: float = 0.0
    #: an active's item or round share: seconds the runner spent processing its records (reading,
    #: processing, committing; never waiting for input), its fair share where the runner processed
    #: other records at the same time (executor/busy_clock.py); 0 for restores and standbys
    busy_s: float = 0.0
    #: the part of `busy_s` that its rounds' per-round cost explains (executor/busy_clock.py's
    #: `RoundCost`; 0 where no round estimate is known: micro-batches, the first rounds)
    busy_per_round_s: float = 0.0
    message: str = ""
    figures: TaskFigures | None = None
    #: a restoring or tailing copy: records applied since its restore (or tail) started, and
    #: changelog offsets still to go
    restored: int = 0
    restore_remaining: int = 0
    #: executor slots only: the volume's inventory after this batch
    inventory: tuple[TaskInventory, ...] | None = None
    #: host:port of the executor's query endpoint (on one result of each reply)
    query_address: str = ""


def volume_inventory(settings: BatchSettings, executor: str) -> ItemResult:
    """What `executor`'s volume holds of the app (each task directory's stores and offsets), as
    the result that carries it to the driver (a Spark job's slot, or a sync over HTTP)."""
    held = tuple(StateDirectory(settings.state_dir_for(executor)).inventory(settings.app))
    return ItemResult("", executor, Role.ACTIVE, ItemStatus.PROCESSED, inventory=held)
