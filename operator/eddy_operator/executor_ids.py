"""A restarted driver hands executor ids out anew, to the pods that outlived the last one (their
task runners went on processing: docs/operations.md, "A driver restart without an outage"). The
same pod is the same executor: the operator renames the last published assignment's ids and what
each volume holds by pod, so that the assignor keeps every task where it is. While those pods
register with the new driver one by one, the operator waits for all of them (`reregistering`)
instead of failing the others' tasks over. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from eddy_contract import channel
from eddy_contract.assignor import Assignment, Executor, TaskAssignment
from eddy_operator.pods import PodInfo, instant

__all__ = ["REREGISTRATION_GRACE_S", "executor_renames", "held_by_live_id", "renamed", "reregistering"]

#: how long after a driver pod started the operator waits for the executor pods that outlived the
#: last driver to register with it before it takes them for lost (their JVMs start, then register,
#: once the new driver's SparkContext is up: 30-100 s on the loaded 2-core test machine)
REREGISTRATION_GRACE_S = 180.0


def reregistering(previous: channel.AssignmentMessage | None, pods: Iterable[PodInfo],
                  driver_started: str | None) -> list[str]:
    """The pods of `previous`'s executors that outlived its driver and have not registered with a
    new one yet: started before the driver pod (`driver_started`, ISO 8601; a pod made since, under
    the same name, is a new executor), running, ready (their runner is warm: it holds tasks and
    goes on processing them), without an executor id (a starting driver labels the pods it adopts
    `EXECID`, as Spark labels a pod until its executor registers: driver/executor_set.py). Until
    they register, an assignment would take them for lost and move their tasks to the pods that
    registered first."""
    if previous is None or not driver_started:
        return []
    named = {e.pod for e in previous.executors if e.pod}
    return sorted(p.name for p in pods
                  if p.name in named and p.role == "executor" and p.phase == "Running" and p.ready
                  and not p.deleting and (p.exec_id is None or not p.exec_id.isdigit())
                  and p.started_at is not None and instant(p.started_at) < instant(driver_started))


def executor_renames(previous: channel.AssignmentMessage | None, live: Iterable[Executor]) -> dict[str, str]:
    """Old id -> new id of each executor of `previous` whose pod is live under another id: a
    restarted driver hands executor ids out anew to the pods that outlived the old one (their task
    runners went on processing), so the same pod is the same executor, and keeps its tasks."""
    if previous is None:
        return {}
    by_pod = {e.pod: e.id for e in live if e.pod}
    return {e.id: by_pod[e.pod] for e in previous.executors if e.pod in by_pod and by_pod[e.pod] != e.id}


def renamed(message: channel.AssignmentMessage, renames: Mapping[str, str]) -> channel.AssignmentMessage:
    """`message` with every executor id of `renames` replaced (all at once: ids may be swapped)."""
    def new(e: str) -> str:
        return renames.get(e, e)

    tasks = {t: TaskAssignment(new(a.active), tuple(map(new, a.standbys)), tuple(map(new, a.warmups)))
             for t, a in message.assignment.tasks.items()}
    return replace(message, assignment=Assignment(message.assignment.generation, tasks),
                   executors=tuple(replace(e, id=new(e.id)) for e in message.executors),
                   hosts={new(e): h for e, h in message.hosts.items()})


def held_by_live_id(runtime: channel.RuntimeState, live: Iterable[Executor]) -> dict[str, dict[str, int]]:
    """Per executor, per task, the offsets its volume holds (the assignor's input), under the
    live id of the pod that reported it (a runtime state of the driver before a restart names
    the old ids)."""
    by_pod = {e.pod: e.id for e in live if e.pod}
    live_ids = {e.id for e in live}
    held: dict[str, dict[str, int]] = {}
    for e, inventory in runtime.executors.items():
        key = e if e in live_ids or inventory.pod not in by_pod else by_pod[inventory.pod or ""]
        if key not in held or key == e:
            held[key] = inventory.task_offsets()
    return held
