"""A StreamApp's status, computed from what the operator observes (pure; docs/DESIGN.md, "The
operator's part": Report).

The lifecycle follows the Flink Kubernetes Operator's habit of one `phase` for people and
conditions for machines:

- phase: Pending (nothing runs yet) -> Deploying (driver or executors starting, no assignment)
  -> Running | Restoring (an active task is catching up) | Degraded (fewer executors or standbys
  than asked) ; Failed when the spec cannot be used.
- Ready: every task has a live, caught-up active (the app processes all its input).
- Progressing: something is on its way (driver start, a rolling upgrade, executors joining,
  restores, warmups).
- Degraded: running with less redundancy than asked (executors lost, standbys short).

`lastTransitionTime` changes only when a condition's status changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eddy_contract.assignor import Assignment
from eddy_contract.channel import RuntimeState
from eddy_operator.upgrades import Rejection, RejectionKind

MAX_RESTORING_LISTED = 50


@dataclass(frozen=True)
class Failover:
    """The last time an executor went away and its tasks moved to standbys."""

    time: str
    executor: str
    reason: str
    tasks: tuple[str, ...]
    duration_seconds: float

    def to_status(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "executor": self.executor,
            "reason": self.reason,
            "tasksMoved": len(self.tasks),
            "tasks": list(self.tasks),
            "durationSeconds": round(self.duration_seconds, 4),
        }

    @classmethod
    def from_status(cls, doc: Mapping[str, Any]) -> Failover:
        """Read back what `to_status` wrote; raises KeyError, TypeError or ValueError if it is not that."""
        return cls(
            str(doc["time"]),
            str(doc["executor"]),
            str(doc["reason"]),
            tuple(str(t) for t in doc["tasks"]),
            float(doc["durationSeconds"]),
        )


@dataclass(frozen=True)
class Observed:
    """Everything the status is computed from, gathered by the handlers."""

    now: str
    generation: int | None
    selector: str
    desired_executors: int
    ready_executors: int
    standby_replicas: int
    driver_pod: str | None = None
    driver_ready: bool = False
    assignment: Assignment | None = None
    runtime: RuntimeState | None = None
    last_failover: Failover | None = None
    spec_error: str | None = None
    #: the wanted version's config hash and, if it was rejected, how (eddy_operator.upgrades)
    wanted_version: str | None = None
    rejection: Rejection | None = None
    #: the autoscaler's figures, recommendation and last decision (eddy_operator.autoscaler)
    autoscaling: Mapping[str, Any] | None = None
    #: executor pods at an older pod template, which a rolling upgrade replaces (eddy_operator.rollout)
    outdated_executors: int = 0


@dataclass(frozen=True)
class TaskCounts:
    total: int = 0
    running: int = 0
    restoring: int = 0
    standby: int = 0
    warmup: int = 0


def count_tasks(assignment: Assignment | None, runtime: RuntimeState | None) -> TaskCounts:
    if assignment is None:
        return TaskCounts()
    restoring_actives = {
        r.task
        for r in (runtime.restores if runtime is not None else ())
        if r.role == "active"
        and r.remaining > 0
        and assignment.tasks.get(r.task) is not None
        and assignment.tasks[r.task].active == r.executor
    }
    total = len(assignment.tasks)
    return TaskCounts(
        total=total,
        running=total - len(restoring_actives),
        restoring=len(restoring_actives),
        standby=sum(len(a.standbys) for a in assignment.tasks.values()),
        warmup=sum(len(a.warmups) for a in assignment.tasks.values()),
    )


def _condition(type_: str, status: bool, reason: str, message: str) -> dict[str, Any]:
    return {"type": type_, "status": "True" if status else "False", "reason": reason, "message": message}


def compute_status(observed: Observed, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole `status` of the StreamApp."""
    o = observed
    counts = count_tasks(o.assignment, o.runtime)
    wanted_standbys = min(o.standby_replicas, max(o.desired_executors - 1, 0))
    short_standbys = o.assignment is not None and any(
        len(a.standbys) < wanted_standbys
        for t, a in o.assignment.tasks.items()
        # stateless tasks have no standbys by design
        if o.runtime is None or o.runtime.changelog_end_offsets.get(t)
    )
    executors_short = o.ready_executors < o.desired_executors

    if o.spec_error is not None:
        phase = "Failed"
    elif o.driver_pod is None:
        phase = "Pending"
    elif not o.driver_ready or o.assignment is None or o.ready_executors == 0:
        phase = "Deploying"
    elif counts.restoring:
        phase = "Restoring"
    elif executors_short or short_standbys:
        phase = "Degraded"
    else:
        phase = "Running"

    processing = phase in ("Running", "Degraded", "Restoring") and counts.restoring == 0
    if o.spec_error is not None:
        ready = _condition("Ready", False, "InvalidSpec", o.spec_error)
    elif o.driver_pod is None or not o.driver_ready:
        ready = _condition("Ready", False, "DriverNotReady", "the Spark driver is not ready")
    elif o.ready_executors == 0:
        ready = _condition("Ready", False, "NoExecutors", "no executor is running")
    elif o.assignment is None:
        ready = _condition("Ready", False, "AwaitingAssignment", "waiting for the driver's task list")
    elif counts.restoring:
        ready = _condition("Ready", False, "Restoring", f"{counts.restoring} active task(s) restoring state")
    else:
        ready = _condition("Ready", processing, "TasksRunning", f"{counts.total} task(s) running")

    if o.spec_error is not None:
        progressing = _condition("Progressing", False, "InvalidSpec", o.spec_error)
    elif o.driver_pod is None or not o.driver_ready:
        progressing = _condition("Progressing", True, "DeployingDriver", "starting the Spark driver")
    elif o.outdated_executors:
        progressing = _condition(
            "Progressing", True, "RollingUpgrade", f"{o.outdated_executors} of {o.desired_executors} executor pod(s) "
            "at the old pod template: replaced one at a time, each once its actives are on warm copies elsewhere")
    elif executors_short:
        progressing = _condition(
            "Progressing", True, "ExecutorsStarting", f"{o.ready_executors}/{o.desired_executors} executors ready"
        )
    elif counts.restoring:
        progressing = _condition("Progressing", True, "Restoring", f"{counts.restoring} task(s) restoring")
    elif counts.warmup:
        progressing = _condition("Progressing", True, "WarmingUp", f"{counts.warmup} warmup replica(s) catching up")
    else:
        progressing = _condition("Progressing", False, "Stable", "nothing to do")

    if executors_short and o.assignment is not None:
        degraded = _condition(
            "Degraded", True, "ExecutorsUnavailable", f"{o.ready_executors}/{o.desired_executors} executors ready"
        )
    elif short_standbys:
        degraded = _condition("Degraded", True, "StandbysUnavailable", f"fewer than {wanted_standbys} standby(s)")
    else:
        degraded = _condition("Degraded", False, "AsExpected", "redundancy as asked")

    rejection = o.rejection
    if rejection is not None and rejection.kind == RejectionKind.REFUSED:
        refused = _condition("UpgradeRefused", True, "IncompatibleTopology",
                             f"version {o.wanted_version} refused, {_running_instead(rejection)}: {rejection.reason}")
    else:
        refused = _condition("UpgradeRefused", False, "Compatible", "the wanted version's topology keeps the state")
    if rejection is not None and rejection.kind == RejectionKind.FAILED:
        back = _condition("RolledBack", rejection.rolled_back_to is not None, "HealthGateFailed",
                          f"version {o.wanted_version} failed its health gate, {_running_instead(rejection)}: "
                          f"{rejection.reason}")
    else:
        back = _condition("RolledBack", False, "Healthy", "the wanted version was not rolled back")

    previous_conditions = {c.get("type"): c for c in (previous or {}).get("conditions", []) or []}
    conditions = []
    for cond in (ready, progressing, degraded, refused, back):
        before = previous_conditions.get(cond["type"])
        cond["lastTransitionTime"] = (
            before["lastTransitionTime"]
            if before and before.get("status") == cond["status"] and before.get("lastTransitionTime")
            else o.now
        )
        if o.generation is not None:
            cond["observedGeneration"] = o.generation
        conditions.append(cond)

    status: dict[str, Any] = {
        "phase": phase,
        "selector": o.selector,
        "conditions": conditions,
        "executors": {"desired": o.desired_executors, "ready": o.ready_executors},
        "driver": {"pod": o.driver_pod or "", "ready": o.driver_ready},
        "tasks": {
            "total": counts.total,
            "running": counts.running,
            "restoring": counts.restoring,
            "standby": counts.standby,
            "warmup": counts.warmup,
        },
        # The first few only: an app with thousands of tasks must not outgrow its object.
        "restoring": [
            {
                "task": r.task,
                "executor": r.executor,
                "role": r.role,
                "lag": r.remaining,
                "restored": r.restored,
                "total": r.total,
            }
            for r in (o.runtime.restores if o.runtime is not None else ())
            if r.remaining > 0
        ][:MAX_RESTORING_LISTED],
    }
    if o.generation is not None:
        status["observedGeneration"] = o.generation
    if o.assignment is not None:
        status["assignmentGeneration"] = o.assignment.generation
    if o.autoscaling is not None:
        status["autoscaling"] = dict(o.autoscaling)
    if o.last_failover is not None:
        status["lastFailover"] = o.last_failover.to_status()
    elif previous and previous.get("lastFailover"):
        status["lastFailover"] = previous["lastFailover"]
    return status


def _running_instead(rejection: Rejection) -> str:
    if rejection.rolled_back_to is None:
        return "nothing to go back to"
    return f"version {rejection.rolled_back_to} runs instead until the spec changes"


def without_times(status: Mapping[str, Any]) -> dict[str, Any]:
    """The status minus transition times, to tell whether a patch would change anything."""
    out = dict(status)
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions", [])
    ]
    return out
