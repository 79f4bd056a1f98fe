"""A restarted driver hands executor ids out anew, to the pods that outlived the last one (their
task runners went on processing: docs/operations.md, "A driver restart without an outage"). The
same pod is the same executor: the operator renames the last published assignment's ids and what
each volume holds by pod, so that the assignor keeps every task where it is. While those pods
register with the new driver one by one, the operator waits for all of them (`reregistering`)
instead of failing the others' tasks over.

The other way round, a pod whose container restarted (its JVM and runner killed, its node
rebooted) still carries the executor id Spark gave its last container until the new JVM
registers and Spark labels the pod anew: for those seconds the old id looks live again, and an
assignment made then would hand the actives just failed over back to an executor that is gone
(`Incarnations` tells which ids are stale). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from eddy_contract import channel
from eddy_contract.assignor import Assignment, Executor, TaskAssignment
from eddy_operator.pods import PodInfo, instant

__all__ = ["REREGISTRATION_GRACE_S", "Incarnations", "carried_ids", "driver_life_started", "executor_renames",
           "held_by_live_id", "renamed", "reregistering", "reused"]

#: how long after a driver pod started the operator waits for the executor pods that outlived the
#: last driver to register with it before it takes them for lost (their JVMs start, then register,
#: once the new driver's SparkContext is up: 30-100 s on the loaded 2-core test machine)
REREGISTRATION_GRACE_S = 180.0


def driver_life_started(pods: Iterable[PodInfo]) -> str | None:
    """When the app's driver (its pod not being deleted) started its present life, ISO 8601: its
    container's start once it runs, else the pod's. A driver whose node was lost and came back
    keeps its pod (and the pod's start) but starts over in a new container, and the executor pods
    that outlived it register with that one: counted from the pod's start, a driver pod older than
    `REREGISTRATION_GRACE_S` waited for none of them, and their tasks failed over to whichever
    registered first (the short fault campaign in CI, 2026-11-29: the node that died held the
    driver and one executor; the other executor, whose runner went on, was reported lost too)."""
    drivers = [p for p in pods if p.role == "driver" and not p.deleting]
    if not drivers:
        return None
    return drivers[0].running_since or drivers[0].started_at


def reregistering(previous: channel.AssignmentMessage | None, pods: Iterable[PodInfo],
                  driver_started: str | None) -> list[str]:
    """The pods of `previous`'s executors that outlived its driver and have not registered with a
    new one yet: their containers running since before the driver's present life started
    (`driver_started`, ISO 8601: `driver_life_started`; a pod made since under the same name, or
    a container started again since, is a new executor), without an executor id (a starting
    driver labels the pods it adopts `EXECID`, as Spark labels a pod until its executor
    registers: driver/executor_set.py). Until they register, an assignment would take them for
    lost and move their tasks to the pods that registered first. Ready or not: a runner that goes
    on through a driver's restart is not ready while a copy of it is behind, or while it answers
    the kubelet's probe late (the short fault campaign, 2026-11-29: a pod that outlived the driver
    was reported lost, "not ready", 5 s after the new driver labelled it)."""
    if previous is None or not driver_started:
        return []
    named = {e.pod for e in previous.executors if e.pod}
    return sorted(p.name for p in pods
                  if p.name in named and p.role == "executor" and p.phase == "Running" and p.running
                  and not p.deleting and (p.exec_id is None or not p.exec_id.isdigit())
                  and p.running_since is not None and instant(p.running_since) < instant(driver_started))


def executor_renames(previous: channel.AssignmentMessage | None, live: Iterable[Executor],
                     carried_over: Callable[[str, str], bool] = lambda old_id, pod: True) -> dict[str, str]:
    """Old id -> new id of each executor of `previous` whose pod is live under another id: a
    restarted driver hands executor ids out anew to the pods that outlived the old one (their task
    runners went on processing), so the same pod is the same executor, and keeps its tasks; but only
    if `carried_over(old id, pod name)`: the same container life (`Incarnations.carried_over`), not
    a pod made again under its name nor a container restarted."""
    if previous is None:
        return {}
    by_pod = {e.pod: e.id for e in live if e.pod}
    return {e.id: by_pod[e.pod] for e in previous.executors
            if e.pod in by_pod and by_pod[e.pod] != e.id and carried_over(e.id, e.pod)}


def renamed(message: channel.AssignmentMessage, renames: Mapping[str, str]) -> channel.AssignmentMessage:
    """`message` with every executor id of `renames` replaced (all at once: ids may be swapped)."""
    def new(e: str) -> str:
        return renames.get(e, e)

    tasks = {t: TaskAssignment(new(a.active), tuple(map(new, a.standbys)), tuple(map(new, a.warmups)))
             for t, a in message.assignment.tasks.items()}
    return replace(message, assignment=Assignment(message.assignment.generation, tasks),
                   executors=tuple(replace(e, id=new(e.id)) for e in message.executors),
                   hosts={new(e): h for e, h in message.hosts.items()},
                   lives={new(e): life for e, life in message.lives.items()})


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


@dataclass
class Incarnations:
    """Which container life of its pod each executor id was seen in: the pod's uid and restart
    count. A pod keeps the id label of its last registered JVM until the next one registers, so a
    pod seen under the same label after its containers restarted, with no other label between,
    carries a stale one. Ids are Spark's count per driver (a new driver counts from 1 again), so an
    id names an executor only together with its pod. An executor of the last assignment that is on
    its pod under another id moved there with its runner (a new driver) only if the pod is the same
    container life, not a pod made again under its name nor a container restarted."""

    #: pod uid -> (its executor-id label, its restarts) when the label was first seen on it
    _labels: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: (pod name, executor id) -> (the pod's uid, its restarts) when first seen under that id
    _lives: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)

    def mark(self, pods: Iterable[PodInfo], keep: Iterable[tuple[str, str]] = (),
             runtime: channel.RuntimeState | None = None) -> tuple[PodInfo, ...]:
        """`pods` (one app's, all of them), each executor pod whose id is stale marked so
        (`PodInfo.stale_id`); remembers the others' ids, and forgets the (pod, id) pairs neither on
        a pod nor in `keep` (the last published assignment's). An operator that starts (or takes
        over) knows the lives of the last assignment's executors from it (`learn`).

        An id the driver reports live at the pod's address (`runtime`), in a state it published
        after the pod's containers last started, is not stale: the new container's JVM registered
        under it before the kubelet reported the restart (the operator saw the new label with the
        old restart count: a JVM that starts in 2 s, on the image's class-sharing archive, did so
        in a CI run, and its executor was taken for stale for good)."""
        kept = set(keep)
        lives = {k: life for k, life in self._lives.items() if k in kept}
        labels: dict[str, tuple[str, int]] = {}
        out = []
        for p in pods:
            if p.role != "executor" or not p.uid or p.exec_id is None:
                out.append(p)
                continue
            before = self._labels.get(p.uid)
            same_label = before is not None and before[0] == p.exec_id
            labels[p.uid] = before if before is not None and same_label else (p.exec_id, p.restarts)
            if same_label and p.exec_id.isdigit() and before is not None and p.restarts > before[1] \
                    and not _registered_since_start(runtime, p):
                out.append(replace(p, stale_id=True))
                continue
            if p.exec_id.isdigit():
                key = (p.name, p.exec_id)
                known = self._lives.get(key)
                lives[key] = known if known is not None and known[0] == p.uid else (p.uid, p.restarts)
            out.append(p)
        self._labels, self._lives = labels, lives
        return tuple(out)

    def learn(self, message: channel.AssignmentMessage) -> None:
        """What a published assignment says of its executors' lives (`AssignmentMessage.lives`),
        for the pods this operator has not seen itself (it took over since)."""
        for e in message.executors:
            uid, _, restarts = message.lives.get(e.id, "").rpartition("/")
            if uid and restarts.isdigit():
                self._lives.setdefault((e.pod, e.id), (uid, int(restarts)))
                self._labels.setdefault(uid, (e.id, int(restarts)))

    def labels_seen(self) -> dict[str, str]:
        """Every executor pod's id label as this operator first saw it, pod uid -> "<id>/<restarts>":
        kept beside the assignment (`orchestrator.LABELS_KEY`) for the leader that takes over next.
        The assignment's `lives` name only its own executors, and the one that fails over a
        restarted container's executor no longer names it, while its pod may still carry its id."""
        return {uid: f"{exec_id}/{restarts}" for uid, (exec_id, restarts) in sorted(self._labels.items())}

    def learn_labels(self, seen: Mapping[str, str]) -> None:
        """What the last leader saw of the pods' labels (`labels_seen`), for the pods this operator
        has not seen itself: a pod it first sees under an id the last leader saw before the
        container restarted carries a stale id."""
        for uid, label in seen.items():
            exec_id, _, restarts = label.rpartition("/")
            if exec_id and restarts.isdigit():
                self._labels.setdefault(uid, (exec_id, int(restarts)))

    def life(self, exec_id: str, pod: str) -> str | None:
        """The container life `exec_id` was seen in on `pod`, as `AssignmentMessage.lives` says it."""
        life = self._lives.get((pod, exec_id))
        return f"{life[0]}/{life[1]}" if life is not None else None

    def carried_over(self, old_id: str, pod: PodInfo) -> bool:
        """Whether `pod`, now under another id, is the container life that held `old_id` (a new
        driver gave its JVM a new id; its runner went on), so that it keeps `old_id`'s tasks.
        Pairs whose life is unknown (an assignment published before lives were) are taken to be."""
        life = self._lives.get((pod.name, old_id))
        return life is None or life == (pod.uid or "", pod.restarts)


#: a container's start time has whole seconds: a state published this long after it came from
#: a driver that saw the new container's JVM, if it names its id at the pod's address
_START_RESOLUTION_S = 1.0


def _registered_since_start(runtime: channel.RuntimeState | None, pod: PodInfo) -> bool:
    """The driver's state, published after `pod`'s containers last started, has the pod's executor
    id live at the pod's address."""
    if runtime is None or pod.running_since is None or pod.exec_id is None or not pod.ip:
        return False
    inventory = runtime.executors.get(pod.exec_id)
    if inventory is None or inventory.host != pod.ip:
        return False
    try:
        published = instant(runtime.updated_at)
    except ValueError:
        return False
    return (published - instant(pod.running_since)).total_seconds() >= _START_RESOLUTION_S


def reused(previous: channel.AssignmentMessage | None, live: Iterable[Executor]) -> dict[str, str]:
    """Old id -> a name of its own for each executor of `previous` (after any renames) whose id a
    new driver has since handed to another pod: it is not the live executor of that id, and its
    tasks fail over as a lost executor's (`<id>@<pod>`, the name its loss is reported under)."""
    if previous is None:
        return {}
    pods = {e.id: e.pod for e in live}
    return {e.id: f"{e.id}@{e.pod}" for e in previous.executors
            if e.id in pods and e.pod and pods[e.id] and pods[e.id] != e.pod}


def carried_ids(previous: channel.AssignmentMessage | None, live: Iterable[Executor],
                carried_over: Callable[[str, str], bool] = lambda old_id, pod: True) -> dict[str, str]:
    """Old id -> new name of `previous`'s executors under a new driver, to rename all at once: each
    on its pod under the id the new driver gave it (`executor_renames`), and each other one whose id
    the new driver handed to another pod under a name of its own (`reused`). Both from `previous`
    as published: renaming one pod's executor to an id another one of `previous` still holds would
    leave two executors under one id (the second one's pod then reported lost under the first's)."""
    renames = executor_renames(previous, live, carried_over)
    taken = {old: name for old, name in reused(previous, live).items() if old not in renames}
    return {**taken, **renames}
