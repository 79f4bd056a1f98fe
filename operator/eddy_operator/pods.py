"""An app's pods as the operator reads them: role, executor id, node, phase and readiness, why
a pod was lost, its cores, which executors the assignor may use (live, registered with the
driver, with the zone of their node), and which of the last published assignment's are lost, and
why. Plain functions of pod and node dicts, no apiserver."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple

from eddy_contract import channel
from eddy_contract.assignor import Executor
from eddy_contract.upgrade import OUTDATED_ANNOTATION
from eddy_operator import builders


class LossReason(StrEnum):
    """Why an executor pod stopped counting as live (in its ExecutorLost Event and the failover)."""

    DELETED = "deleted"
    EVICTED = "evicted"
    FAILED = "failed"
    NOT_READY = "not ready"
    #: a container of the pod ended (its executor JVM died: the entrypoint ends the container,
    #: which restarts in the same pod) and is not running again yet
    EXITED = "exited"
    #: its node is not Ready (its kubelet stopped reporting): the pod's status is the last it sent
    NODE_DOWN = "on a node that is down"
    #: its task runner has not answered the operator's probes for a while (eddy_operator.reachability)
    UNREACHABLE = "not answering the operator's probes"


@dataclass(frozen=True)
class PodInfo:
    """What the operator needs to know about one pod of an app (driver or executor)."""

    name: str
    role: str  # its spark-role or eddy.dev/role label: "driver", "executor", or "" if neither
    exec_id: str | None
    node: str | None
    phase: str
    ready: bool
    deleting: bool
    reason: str | None
    zone_label: str | None
    cores: int = 1
    #: the pod's address (status.podIP), what Spark knows its executor by
    ip: str | None = None
    #: every container of the pod is running (ready or not)
    running: bool = False
    #: the driver's version (its `eddy.dev/config-hash` annotation)
    config_hash: str | None = None
    #: restarts of its containers, summed
    restarts: int = 0
    #: a container ended and is not running again yet (terminated, or waiting after it ended)
    exited: bool = False
    #: since when every container has been running (the latest container start, ISO 8601), if they are
    running_since: str | None = None
    #: when the pod started (status.startTime, ISO 8601), if it did
    started_at: str | None = None
    #: the PersistentVolumeClaims its volumes name
    claims: tuple[str, ...] = ()
    uid: str | None = None
    #: since when the scheduler has found no node for it (its PodScheduled condition), if so
    unschedulable_since: str | None = None
    #: its container restarted since Spark labelled it with `exec_id`: that executor ended with the
    #: container, and the new JVM has not registered under its new id yet (executor_ids.Incarnations)
    stale_id: bool = False
    #: an executor pod at an older pod template than its StatefulSet's (eddy_operator.rollout)
    outdated: bool = False

    @property
    def live_executor(self) -> bool:
        """Running, not going away, and registered with the driver (Spark labels the pod with its
        executor id once the driver handed one out; until then it says `EXECID`). Not necessarily
        ready: an executor pod is ready once its copies are warm, and it gets them only as a live
        executor."""
        return (
            self.role == "executor"
            and self.phase == "Running"
            and (self.running or self.ready)
            and not self.deleting
            and self.exec_id is not None
            and self.exec_id.isdigit()
            and not self.stale_id
        )

    @property
    def loss_reason(self) -> LossReason:
        if self.deleting:
            return LossReason.DELETED
        if self.reason == "Evicted":
            return LossReason.EVICTED
        if self.phase == "Failed":
            return LossReason.FAILED
        if self.exited or self.stale_id:
            return LossReason.EXITED
        return LossReason.NOT_READY


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    """A pod's manifest (as the apiserver returns it) read into a PodInfo."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    scheduled: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
    role = labels.get(builders.SPARK_ROLE_LABEL) or labels.get(builders.ROLE_LABEL) or ""
    return PodInfo(
        name=str(meta.get("name", "")),
        uid=meta.get("uid"),
        role=str(role),
        exec_id=labels.get(builders.SPARK_EXEC_ID_LABEL),
        node=(pod.get("spec") or {}).get("nodeName"),
        phase=str(status.get("phase") or "Pending"),
        ready=conditions.get("Ready") == "True",
        deleting=meta.get("deletionTimestamp") is not None,
        reason=status.get("reason"),
        zone_label=labels.get(builders.ZONE_LABEL),
        cores=pod_cores(pod),
        ip=status.get("podIP"),
        config_hash=(meta.get("annotations") or {}).get(builders.CONFIG_HASH_ANNOTATION),
        outdated=OUTDATED_ANNOTATION in (meta.get("annotations") or {}),
        restarts=sum(int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or []),
        exited=any(_exited(c) for c in status.get("containerStatuses") or []),
        started_at=status.get("startTime"),
        claims=tuple(str(v["persistentVolumeClaim"]["claimName"]) for v in (pod.get("spec") or {}).get("volumes") or []
                     if (v.get("persistentVolumeClaim") or {}).get("claimName")),
        unschedulable_since=scheduled.get("lastTransitionTime")
        if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable" else None,
        running=bool(status.get("containerStatuses"))
        and all((c.get("state") or {}).get("running") is not None for c in status.get("containerStatuses") or []),
        running_since=_running_since(status.get("containerStatuses") or []),
    )


def _running_since(containers: Iterable[Mapping[str, Any]]) -> str | None:
    """The latest start among the containers, if every one is running (ISO 8601 compares as text)."""
    starts = [str(((c.get("state") or {}).get("running") or {}).get("startedAt") or "") for c in containers]
    return max(starts) if starts and all(starts) else None


def _exited(container: Mapping[str, Any]) -> bool:
    """A container status that says it ended and is not running again yet."""
    state = container.get("state") or {}
    if state.get("running") is not None:
        return False
    return state.get("terminated") is not None or (container.get("lastState") or {}).get("terminated") is not None


def pod_cores(pod: Mapping[str, Any]) -> int:
    """The cores of a pod's first container (its CPU request, else limit; Spark sets both from
    spark.executor.cores), rounded down, at least 1: the executor's weight in the assignor."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    resources = containers[0].get("resources") or {}
    cpu = str((resources.get("requests") or {}).get("cpu") or (resources.get("limits") or {}).get("cpu") or "1")
    try:
        value = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    except ValueError:
        return 1
    return max(1, int(value))


def zone_of(node: str | None, nodes: Mapping[str, Mapping[str, str]], zone_key: str) -> str | None:
    """The zone of a node from its labels (`nodes`: node name -> labels); None if unknown."""
    if node is None:
        return None
    return (nodes.get(node) or {}).get(zone_key)


def live_executors(pods: Iterable[PodInfo], nodes: Mapping[str, Mapping[str, str]], zone_key: str,
                   down_nodes: Collection[str] = (), unreachable: Collection[str] = ()) -> list[Executor]:
    """The executors the assignor may use: none on a node that is down (`down_nodes`: the pod's
    status is the last its kubelet sent) nor in a pod that stopped answering (`unreachable`: pod
    names); if two pods claim one id (a stale pod and its replacement) the live one wins by
    construction, because only live pods are kept."""
    seen: dict[str, Executor] = {}
    for p in pods:
        if p.live_executor and p.exec_id is not None and p.node not in down_nodes and p.name not in unreachable:
            seen[p.exec_id] = Executor(p.exec_id, p.name, zone_of(p.node, nodes, zone_key), p.cores)
    return [seen[k] for k in sorted(seen, key=lambda e: (len(e), e))]


def instant(iso: str) -> datetime:
    """A Kubernetes timestamp (ISO 8601, `Z` for UTC) as an aware datetime."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


class LostExecutor(NamedTuple):
    """An executor of the last published assignment that is no longer live, why, and the tasks
    whose actives it held (they fail over)."""

    executor: Executor
    reason: LossReason
    moved: tuple[str, ...]


def lost_executors(
    previous: channel.AssignmentMessage | None, live: Iterable[Executor], pods: Iterable[PodInfo],
    down_nodes: Collection[str] = (), unreachable: Collection[str] = (),
) -> list[LostExecutor]:
    """The executors `previous` (the last published message) named that are not among `live`
    (`down_nodes`: the nodes that are down, whose pods' executors are lost with them;
    `unreachable`: the pods whose runner stopped answering)."""
    if previous is None:
        return []
    live_ids = {e.id for e in live}
    pods_by_name = {p.name: p for p in pods}
    lost = []
    for gone in previous.executors:
        if gone.id in live_ids:
            continue
        moved = tuple(previous.assignment.active_tasks(gone.id))
        pod = pods_by_name.get(gone.pod)
        if pod is None:
            reason = LossReason.DELETED
        elif pod.deleting:
            reason = pod.loss_reason
        elif pod.node in down_nodes:
            reason = LossReason.NODE_DOWN
        elif pod.name in unreachable:
            reason = LossReason.UNREACHABLE
        else:
            reason = pod.loss_reason
        lost.append(LostExecutor(gone, reason, moved))
    return lost
