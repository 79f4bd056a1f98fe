"""What the orchestrator's scaling steps decide from (docs/operations.md, "Scaling" and
"Autoscaling"): which executor pods a scale-in removes, which executors take no new copy yet, the
autoscaler's sample of a runtime state and its figures in status, and what holds a recommendation
back. Pure functions of pods, assignments and runtime states; `orchestrator` carries them out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from eddy_contract import channel
from eddy_contract.assignor import Assignment, Executor
from eddy_contract.spec import StreamAppSpec
from eddy_operator import builders
from eddy_operator.autoscaler import Rates, Sample
from eddy_operator.pods import PodInfo, instant

__all__ = ["AUTOSCALING_STATUS_KEYS", "autoscaling_status", "figures_status", "load_sample", "surplus",
           "unknown_to_driver", "warming"]

#: every key `status.autoscaling` may carry
AUTOSCALING_STATUS_KEYS = ("executors", "recommended", "reason", "holding", "inputRate", "processedRate", "backlog",
                           "busyPercent", "perRoundPercent", "capacityPerExecutor", "lastDecision")


def surplus(pods: Iterable[PodInfo], spec: StreamAppSpec) -> set[str]:
    """The executor pods past the wanted count (ordinal >= spec.executors.replicas): they go."""
    return {p.name for p in pods if p.role == "executor" and not p.deleting
            and (n := builders.executor_ordinal(spec.name, p.name)) is not None and n >= spec.executors.replicas}


def unknown_to_driver(executors: Iterable[Executor], runtime: channel.RuntimeState, previous: Assignment | None,
                      going: Collection[str] = ()) -> list[str]:
    """Live executors that take no new copy yet: registered (their pod carries an id) but not named
    by the driver's runtime state, so their volume's inventory is not known, and holding nothing in
    the last assignment. Given copies now, an executor back on its own volume under a new id would
    get warmups restoring whole changelogs for tasks whose tails it holds (the inventory comes with
    its first batch); a leaving executor takes none (eddy_contract.assignor, rule 5)."""
    if previous is None or not runtime.executors:
        return []
    holding = set(previous.executors())
    return [e.id for e in executors if e.id not in runtime.executors and e.id not in holding and e.id not in going]


def load_sample(runtime: channel.RuntimeState) -> Sample | None:
    """The autoscaler's sample of a runtime state: the executors' load and the input backlog."""
    if not runtime.load or not runtime.updated_at:
        return None
    return Sample(instant(runtime.updated_at).timestamp(), runtime.load_since,
                  {e: load.records for e, load in runtime.load.items()},
                  {e: load.busy_s for e, load in runtime.load.items()}, sum(runtime.input_lag.values()),
                  {e: load.per_round_s for e, load in runtime.load.items()})


def figures_status(figures: Rates | None) -> dict[str, Any]:
    """The autoscaler's figures as `status.autoscaling` shows them (nothing before it has any)."""
    if figures is None:
        return {}
    status: dict[str, Any] = {"inputRate": round(figures.input_rate, 1), "processedRate": round(figures.processed, 1),
                              "backlog": figures.backlog, "busyPercent": round(100 * figures.busy, 1),
                              "perRoundPercent": round(100 * figures.per_round, 1)}
    if figures.capacity is not None:
        status["capacityPerExecutor"] = round(figures.capacity, 1)
    return status


def autoscaling_status(current: int, figures: Rates | None, last_decision: Mapping[str, Any] | None) -> dict[str, Any]:
    """`status.autoscaling` before this sync's recommendation: every key it may carry, None where
    one does not apply now. The status is written as a merge patch, which keeps a key it does not
    mention: without the Nones, a `holding` from a move long done would stay, beside the
    recommendations taken since."""
    status: dict[str, Any] = dict.fromkeys(AUTOSCALING_STATUS_KEYS)
    status.update(executors=current, lastDecision=last_decision, **figures_status(figures))
    return status


def warming(message: channel.AssignmentMessage | None, runtime: channel.RuntimeState, executors: list[Executor],
            wanted: int, going: Collection[str]) -> str | None:
    """Why the autoscaler takes no recommendation now (a move under way: `going` are the pods a
    scale-in removes, executors the driver has not named yet get their copies later), or None."""
    if message is None:
        return "no assignment yet"
    if len(executors) != wanted or going:
        return f"{len(executors)} live executor(s), {wanted} wanted"
    # new executors take copies only once the driver names them: the move has not begun
    unknown = unknown_to_driver(executors, runtime, message.assignment, going)
    if unknown:
        return f"executor(s) {', '.join(unknown)} not yet named by the driver"
    warmups = sum(len(a.warmups) for a in message.assignment.tasks.values())
    if warmups:
        return f"{warmups} warmup(s) catching up"
    restoring = [r for r in runtime.restores if r.role == "active"]
    if restoring:
        return f"{len(restoring)} active task(s) restoring"
    return None
