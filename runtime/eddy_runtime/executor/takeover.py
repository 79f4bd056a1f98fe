"""What a runner does for the operator while no driver runs (operator/eddy_operator/driverless.py;
eddy_contract.takeover): fence the lost runners for a generation, and take that generation's
copies of its executor. Served on the runner's endpoint beside the driver's pushes
(protocol/work_push.py's `fence_endpoint` and `takeover_endpoint`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from eddy_contract.spec import ProcessingGuarantee
from eddy_contract.tasks import Role, TaskId
from eddy_runtime.executor.continuous import ContinuousLoop
from eddy_runtime.protocol.fences import fence_for_generation

__all__ = ["fence", "take_over"]


def fence(loop: ContinuousLoop, generation: int, runners: Sequence[str], timeout_s: float) -> dict[str, int]:
    """Fence `runners` for `generation` on the operator's behalf (protocol/fences.py's
    `fence_for_generation`), with the Kafka of `loop`'s last sync; the epochs raised. RuntimeError
    before the first sync (no Kafka to fence with) or on a non-exactly-once app (nothing to fence)."""
    settings = loop.assignment.settings()
    if settings is None or settings.guarantee != ProcessingGuarantee.EXACTLY_ONCE:
        raise RuntimeError("no exactly-once work from a driver yet: nothing to fence with")
    return fence_for_generation(settings.kafka, settings.app, generation, runners, timeout_s)


def take_over(loop: ContinuousLoop, generation: int, tasks: Sequence[tuple[str, Role]]) -> bool:
    """Have `loop` take `generation` from the operator: `tasks` are every (task, role) the
    assignment gives this executor, of which the runner takes those of the sub-topologies with no
    DataFrame step (a runner has work only in a continuous app, where those are what runners run; a
    stateless task's standbys are no copies), as the driver's `batch_plan.continuous_copies` does,
    under its own runner key, fence epoch and commit interval (the operator fences no live runner).
    True if it runs that generation or a newer one now (a driver may have pushed it first); False
    before a first sync."""
    current = loop.assignment.current()
    if current is None:
        return False
    if current.work.generation >= generation:
        return True
    mine = tuple((task, role) for task, role in tasks
                 if (sub := current.subs.get(TaskId.parse(task).subtopology)) is not None
                 and not sub.uses_dataframe and (role == Role.ACTIVE or sub.stateful_task))
    return loop.push(replace(current.work, generation=generation, tasks=mine, reset=None))
