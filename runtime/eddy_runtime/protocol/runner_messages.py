"""What Spark's Python workers (and the driver's shutdown job) ask an executor's task runner, and
what it answers: one frozen dataclass per request kind, each naming its reply's type.

Requests and replies travel pickled over the runner's socket (`runner_client.RunnerClient`,
executor/runner.py); a runner answers a request it cannot serve with the exception, which the
client raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from eddy_runtime.kafka.records import BadRecord
from eddy_runtime.protocol.work import BatchSettings, ItemResult, SlotWork

__all__ = [
    "Close",
    "Done",
    "NeedProgram",
    "Ping",
    "Pong",
    "Program",
    "RunReply",
    "RunWork",
    "RunnerRequest",
    "Shutdown",
    "StashRead",
]

_Reply = TypeVar("_Reply", covariant=True)


class RunnerRequest(Generic[_Reply]):
    """A request to a task runner whose reply is a `_Reply` (`RunnerClient.call` returns it)."""

    __slots__ = ()


@dataclass(frozen=True)
class Done:
    """The reply to a request that only has to be carried out."""

    def __str__(self) -> str:
        return "ok"


@dataclass(frozen=True)
class NeedProgram:
    """The reply to a `RunWork` without the program, from a runner that has not cached it yet:
    the caller sends the same request again with the program."""

    program_id: str


@dataclass(frozen=True)
class Program:
    """An app's sub-topologies as its runners run them, pickled once by the driver; a runner
    caches them by `program_id`, so a `RunWork` carries them only when asked (`NeedProgram`)."""

    program_id: str
    sub_topologies: bytes


#: what a runner answers a `RunWork`: one result per item (and its continuous tasks' results)
RunReply = list[ItemResult] | NeedProgram


@dataclass(frozen=True)
class RunWork(RunnerRequest[RunReply]):
    """Run a slot's work items (and sync its continuous tasks) against the runner's tasks.

    `program`: the pickled sub-topologies, sent only when the runner answered `NeedProgram` (a
    runner caches programs by `program_id`). `data`: a DataFrame task's rows (a ``pa.Table``),
    their processing by a stateless sub-topology in the sink step (a
    ``processing.batch.BatchOutput``, a layer above this one), or None for an executor slot.
    """

    program_id: str
    program: bytes | None
    settings: BatchSettings
    slot: SlotWork
    data: object


@dataclass(frozen=True)
class StashRead(RunnerRequest[Done]):
    """What a DataFrame task's read step found, kept for the sink step of the same batch: the bad
    records (for the policy) and how many records it read (for the figures)."""

    batch_id: int
    task: str
    bad_records: tuple[BadRecord, ...]
    records_read: int


@dataclass(frozen=True)
class Close(RunnerRequest[Done]):
    """Close every task the runner holds (stores flushed, checkpoints written)."""


@dataclass(frozen=True)
class Pong:
    """The reply to a `Ping`."""

    executor_id: str
    pid: int


@dataclass(frozen=True)
class Ping(RunnerRequest[Pong]):
    """Is the runner there, and who is it."""


@dataclass(frozen=True)
class Shutdown(RunnerRequest[Done]):
    """Close every task and exit (the driver sends it when it stops)."""
