"""What the driver's work comes to: one batch's `BatchReport` and `BatchOutcome`, and `DriverError`
when the app cannot go on (docs/DESIGN.md, "One micro-batch", step 6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from eddy_contract.assignor import TaskMove
from eddy_runtime.protocol.work import ItemResult, ItemStatus

__all__ = ["BatchOutcome", "BatchReport", "DriverError", "short_error", "stop_error"]


class DriverError(RuntimeError):
    """The app cannot go on (a bad record under policy fail, a pipeline error...)."""


class BatchOutcome(StrEnum):
    """How a batch ended (the ``outcome`` label of ``eddy_driver_batches_total``)."""

    OK = "ok"
    #: an executor died, or a stop outlived the grace period: nothing of the batch is committed
    CANCELLED = "cancelled"
    FAILED = "failed"


@dataclass
class BatchReport:
    """What one batch did, for progress output and tests."""

    batch_id: int
    outcome: BatchOutcome
    duration_s: float
    generation: int
    results: list[ItemResult] = field(default_factory=list)
    #: executors the driver learned were lost since the previous report, each once however it learned
    #: it (a cancelled job, a sync over HTTP, or gone from the scheduler between batches)
    lost_executors: tuple[str, ...] = ()
    error: str | None = None
    moves: tuple[TaskMove, ...] = ()
    #: seconds spent planning (offsets, assignment, plans) and in the Spark job
    plan_s: float = 0.0
    job_s: float = 0.0
    #: an app that runs only continuously: the runners were synced over HTTP, not by a Spark job
    over_http: bool = False

    @property
    def records_in(self) -> int:
        return sum(r.records_in for r in self.results)

    @property
    def records_out(self) -> int:
        return sum(r.records_out for r in self.results)

    def by_status(self, status: ItemStatus) -> list[ItemResult]:
        return [r for r in self.results if r.status == status]


def short_error(e: BaseException) -> str:
    """The gist of a Spark/py4j error: its message lines without the JVM stack."""
    lines = [ln for ln in str(e).splitlines() if ln.strip() and not ln.strip().startswith("at ")]
    return " | ".join(lines[:6])[:1500]


def stop_error(report: BatchReport, failed_in_a_row: int, max_failed_batches: int) -> DriverError | None:
    """Why the app cannot go on after `report` (None: it can): a bad record under policy fail, an
    error in the user's pipeline code, or `max_failed_batches` failed batches in a row."""
    for r in report.by_status(ItemStatus.BAD_RECORD):
        return DriverError(f"task {r.task}: {r.message} (badRecordPolicy: fail)")
    for r in report.by_status(ItemStatus.FAILED):
        if r.message.startswith("pipeline error"):
            return DriverError(f"task {r.task}: {r.message}")
    if failed_in_a_row >= max_failed_batches:
        return DriverError(f"{failed_in_a_row} batches in a row failed; last error: "
                           f"{report.error or [r.message for r in report.by_status(ItemStatus.FAILED)][:1]}")
    return None
