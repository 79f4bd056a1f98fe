"""A rolling upgrade's outdated executor hands its actives over a few at a time
(docs/operations.md, "Rolling upgrades").

The executor being replaced (eddy_operator.rollout) hands each of its actives to a caught-up copy
elsewhere (the assignor's rule 5), and the assignor moves all of them in one generation as soon
as their copies are warm. Each move pauses its task for a hand-over (commit and release on the
old runner, promotion and the committed positions on the new one): all of a pod's at once paused
nearly every partition of the app for 0.6-0.9 s, on one receiving runner, in a rolling upgrade on
two executors (bench/upgrade.py, "compatible image upgrade"). So the operator publishes at most
`PER_STEP` such moves per generation, the next ones once the runtime runs that generation with no
active restoring, or `STEP_TIMEOUT_S` after it was published (a runtime that reports nothing new
must not hold a rollout forever). Drains and scale-ins still hand everything over at once: their
figures (bench/README.md) are without this.

Only the moves off the departing executor wait; the rest of a generation (a lost executor's
failover, warmups, standbys, moves between staying executors) is published as the assignor made
it. A move that waits keeps its task's whole previous placement (active, standbys, warmups), which
is live: the departing executor is still there."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from types import MappingProxyType

from eddy_contract import channel
from eddy_contract.assignor import Assignment, task_sort_key
from eddy_contract.tasks import Role
from eddy_operator.pods import instant

__all__ = ["PER_STEP", "STEP_TIMEOUT_S", "paced", "settled"]

#: actives that may leave departing executors in one generation
PER_STEP = 2
#: seconds after a generation was published after which the next step goes without waiting for it
STEP_TIMEOUT_S = 10.0


def paced(new: Assignment, previous: Assignment | None, departing: Collection[str], live: Collection[str],
          settled: bool) -> Assignment:
    """`new` with at most `PER_STEP` of its moves of an active off a `departing` executor (none
    unless `settled`: the runtime runs `previous` with no active restoring, or its time is up); the
    others keep their `previous` placement where every copy of it is on a `live` executor.
    `previous` itself if nothing is left to publish."""
    if previous is None or not departing:
        return new
    budget = PER_STEP if settled else 0
    tasks = dict(new.tasks)
    for task in sorted(new.tasks, key=task_sort_key):
        before = previous.tasks.get(task)
        if before is None or before.active not in departing or new.tasks[task].active == before.active:
            continue
        if budget > 0:
            budget -= 1
        elif all(e in live for e in (before.active, *before.standbys, *before.warmups)):
            tasks[task] = before
    if tasks == dict(new.tasks):
        return new
    if tasks == dict(previous.tasks):
        return previous
    return Assignment(new.generation, MappingProxyType(tasks))


def settled(message: channel.AssignmentMessage | None, runtime: channel.RuntimeState, now: datetime) -> bool:
    """Whether the next step may go: the runtime runs `message`'s generation and no active of it
    restores, or `STEP_TIMEOUT_S` have passed since it was published."""
    if message is None:
        return True
    if runtime.assignment_generation == message.assignment.generation and not any(
            r.role == Role.ACTIVE for r in runtime.restores):
        return True
    try:
        issued = instant(message.issued_at)
    except ValueError:  # an old message without its time: nothing to wait for
        return True
    return (now - issued).total_seconds() >= STEP_TIMEOUT_S
