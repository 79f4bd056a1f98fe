"""Failover and restore orchestration: from executor pods and the driver's runtime state to a
published assignment, events, status and metrics (docs/DESIGN.md, "The operator's part": Assign, React).

Called by the handlers on every executor-pod event, runtime-state change and StreamApp change.
One `AppController` per app serialises the work with a lock and remembers the last published
assignment (the assignor's `previous`), so that a lost executor's tasks are promoted to their
freshest standbys in one step: pod event -> assign -> one ConfigMap apply. The pure parts
(`pod_info`, `live_executors`, `describe_moves`) are unit-tested; the rest talks to the
apiserver through `eddy_operator.kube`.

Restores need no separate machinery here: a pod that comes back (same volume, new executor id)
or a new one reports its store inventory through the runtime state; the assignor then places
standbys and warmups on it, the driver restores them from the volume's checkpoint (or from the
changelog's start on a new volume), the runtime state shows the lag shrinking, and once a copy
is within acceptableRecoveryLag the assignor moves the active back. Each step is a new
generation and a Kubernetes Event.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from eddy_contract import channel
from eddy_contract.assignor import (
    Assignment,
    AssignmentError,
    AssignorSettings,
    Executor,
    TaskMove,
    assign_app,
    diff,
)
from eddy_contract.spec import SpecError, StreamAppSpec
from eddy_operator import builders, metrics
from eddy_operator.builders import Owner
from eddy_operator.kube import Kube
from eddy_operator.status import Failover, Observed, compute_status, without_times

log = logging.getLogger(__name__)

# Beside the assignment in its ConfigMap; read by the operator only (the driver reads ASSIGNMENT_KEY).
FAILOVER_KEY = "last-failover.json"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True)
class PodInfo:
    """What the operator needs to know about one pod of an app (driver or executor)."""

    name: str
    role: str
    exec_id: str | None
    node: str | None
    phase: str
    ready: bool
    deleting: bool
    reason: str | None
    zone_label: str | None
    cores: int = 1

    @property
    def live_executor(self) -> bool:
        """Running, ready, not going away, and registered with the driver (Spark labels the pod
        with its executor id once the driver handed one out; until then it says `EXECID`)."""
        return (
            self.role == "executor"
            and self.phase == "Running"
            and self.ready
            and not self.deleting
            and self.exec_id is not None
            and self.exec_id.isdigit()
        )

    @property
    def loss_reason(self) -> str:
        if self.deleting:
            return "deleted"
        if self.reason == "Evicted":
            return "evicted"
        if self.phase == "Failed":
            return "failed"
        return "not ready"


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    role = labels.get(builders.SPARK_ROLE_LABEL) or labels.get(builders.ROLE_LABEL) or ""
    return PodInfo(
        name=str(meta.get("name", "")),
        role=str(role),
        exec_id=labels.get(builders.SPARK_EXEC_ID_LABEL),
        node=(pod.get("spec") or {}).get("nodeName"),
        phase=str(status.get("phase") or "Pending"),
        ready=conditions.get("Ready") == "True",
        deleting=meta.get("deletionTimestamp") is not None,
        reason=status.get("reason"),
        zone_label=labels.get(builders.ZONE_LABEL),
        cores=pod_cores(pod),
    )


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
    if node is None:
        return None
    return (nodes.get(node) or {}).get(zone_key)


def live_executors(pods: Iterable[PodInfo], nodes: Mapping[str, Mapping[str, str]], zone_key: str) -> list[Executor]:
    """The executors the assignor may use; if two pods claim one id (a stale pod and its
    replacement) the live one wins by construction, because only live pods are kept."""
    seen: dict[str, Executor] = {}
    for p in pods:
        if p.live_executor and p.exec_id is not None:
            seen[p.exec_id] = Executor(p.exec_id, p.name, zone_of(p.node, nodes, zone_key), p.cores)
    return [seen[k] for k in sorted(seen, key=lambda e: (len(e), e))]


def describe_moves(moves: Iterable[TaskMove], pods_by_id: Mapping[str, str]) -> list[tuple[str, str]]:
    """(reason, message) pairs for the Events of one new generation: one per active move, one
    per kind for standby and warmup placement."""

    def who(e: str | None) -> str:
        return f"executor {e} ({pods_by_id[e]})" if e is not None and e in pods_by_id else f"executor {e}"

    events: list[tuple[str, str]] = []
    grouped: dict[str, list[str]] = {}
    for m in moves:
        if m.kind == "promoted":
            events.append(
                (
                    "TaskPromoted",
                    f"task {m.task}: standby on {who(m.target)} promoted to active, was on {who(m.source)}",
                )
            )
        elif m.kind == "moved":
            events.append(("TaskMoved", f"task {m.task}: active moved from {who(m.source)} to {who(m.target)}"))
        elif m.kind == "assigned":
            grouped.setdefault("TasksAssigned", []).append(f"{m.task}@{m.target}")
        elif m.kind in ("standby-added", "warmup-added"):
            key = "StandbysPlaced" if m.kind == "standby-added" else "WarmupsPlaced"
            grouped.setdefault(key, []).append(f"{m.task}@{m.target}")
        elif m.kind in ("standby-removed", "warmup-removed"):
            grouped.setdefault("ReplicasRemoved", []).append(f"{m.task}@{m.source}")
        elif m.kind == "removed":
            grouped.setdefault("TasksRemoved", []).append(m.task)
    for reason, items in grouped.items():
        shown = ", ".join(items[:40]) + (f" and {len(items) - 40} more" if len(items) > 40 else "")
        events.append((reason, f"{len(items)}: {shown}"))
    return events


@dataclass
class AppController:
    """In-memory state of one app while the operator runs."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    message: channel.AssignmentMessage | None = None
    loaded: bool = False
    last_failover: Failover | None = None
    last_status: dict[str, Any] | None = None


@dataclass(frozen=True)
class Snapshot:
    """What the handlers read from their indexes for one app."""

    streamapp: Mapping[str, Any]
    pods: tuple[PodInfo, ...]
    nodes: Mapping[str, Mapping[str, str]]
    runtime_data: Mapping[str, str] | None
    assignment_data: Mapping[str, str] | None


class Orchestrator:
    """Keeps every app's assignment, status and metrics in step with what is observed."""

    def __init__(self, kube: Kube, post_event: Any = None) -> None:
        self.kube = kube
        # Keyed by uid too: an app deleted and re-created under its name starts afresh even if
        # the operator missed the deletion.
        self.apps: dict[tuple[str, str, str], AppController] = {}
        # post_event(body, type, reason, message): kopf.event inside handlers; None to skip.
        self.post_event = post_event

    def controller(self, namespace: str, app: str, uid: str) -> AppController:
        for key in [k for k in self.apps if k[:2] == (namespace, app) and k[2] != uid]:
            del self.apps[key]
        return self.apps.setdefault((namespace, app, uid), AppController())

    def forget(self, namespace: str, app: str) -> None:
        for key in [k for k in self.apps if k[:2] == (namespace, app)]:
            del self.apps[key]
        metrics.forget_app(namespace, app)

    def _event(self, body: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        if self.post_event is not None:
            try:
                self.post_event(body, type_, reason, message)
            except Exception:  # events are best effort; never let them block an assignment
                log.exception("could not post event %s", reason)

    async def sync(self, snap: Snapshot, cause: str, started: float | None = None) -> None:
        """Assign if anything changed, publish, then refresh the status. `started` is the
        monotonic time the triggering event arrived (for the failover duration)."""
        started = time.monotonic() if started is None else started
        meta = snap.streamapp["metadata"]
        namespace, app = meta["namespace"], meta["name"]
        ctl = self.controller(namespace, app, meta["uid"])
        async with ctl.lock:
            try:
                spec = StreamAppSpec.from_manifest(snap.streamapp)
            except SpecError as err:
                await self._update_status(ctl, snap, None, [], None, spec_error=str(err))
                return
            executors = live_executors(snap.pods, snap.nodes, spec.executors.zone_topology_key)
            runtime = self._runtime_state(snap, app)
            if not ctl.loaded:
                ctl.message = self._decode_previous(snap, app)
                ctl.last_failover = self._decode_failover(snap, app)
                ctl.loaded = True
            if runtime is not None and runtime.changelog_end_offsets and executors:
                await self._assign(ctl, snap, spec, executors, runtime, cause, started)
            await self._update_status(ctl, snap, spec, executors, runtime)

    def _runtime_state(self, snap: Snapshot, app: str) -> channel.RuntimeState | None:
        if not snap.runtime_data or channel.RUNTIME_STATE_KEY not in snap.runtime_data:
            return None
        try:
            return channel.decode_runtime_state(snap.runtime_data)
        except channel.ChannelError as err:
            log.warning("app %s: unusable runtime state: %s", app, err)
            self._event(snap.streamapp, "Warning", "BadRuntimeState", str(err))
            return None

    def _decode_previous(self, snap: Snapshot, app: str) -> channel.AssignmentMessage | None:
        if not snap.assignment_data or channel.ASSIGNMENT_KEY not in snap.assignment_data:
            return None
        try:
            return channel.decode_assignment(snap.assignment_data)
        except channel.ChannelError as err:
            log.warning("app %s: previous assignment unreadable, starting over: %s", app, err)
            return None

    def _decode_failover(self, snap: Snapshot, app: str) -> Failover | None:
        """The failover a previous leader recorded beside the assignment it published: it may have
        died between that write and the status patch, and this leader cannot see the loss again."""
        text = (snap.assignment_data or {}).get(FAILOVER_KEY)
        if not text:
            return None
        try:
            return Failover.from_status(json.loads(text))
        except (ValueError, KeyError, TypeError) as err:
            log.warning("app %s: recorded failover unreadable, ignored: %r", app, err)
            return None

    async def _assign(
        self,
        ctl: AppController,
        snap: Snapshot,
        spec: StreamAppSpec,
        executors: list[Executor],
        runtime: channel.RuntimeState,
        cause: str,
        started: float,
    ) -> None:
        previous = ctl.message.assignment if ctl.message is not None else None
        settings = AssignorSettings(
            standby_replicas=spec.state.standby_replicas,
            acceptable_recovery_lag=spec.state.acceptable_recovery_lag,
            max_warmup_replicas=spec.state.max_warmup_replicas,
        )
        stateful = [t for t, stores in runtime.changelog_end_offsets.items() if stores]
        try:
            new = assign_app(executors, runtime.end_offsets(), runtime.held_offsets(), previous, settings, stateful)
        except AssignmentError as err:
            log.warning("app %s: no assignment: %s", spec.name, err)
            return
        if previous is not None and new is previous:
            return
        live_ids = {e.id for e in executors}
        lost = [e for e in (ctl.message.executors if ctl.message is not None else ()) if e.id not in live_ids]
        pods_by_name = {p.name: p for p in snap.pods}
        # The failover is written in the same ConfigMap update as the assignment that carries it
        # out, so a leader that dies right after the write still leaves it for the next one.
        failovers = []
        for gone in lost:
            moved = tuple(previous.active_tasks(gone.id)) if previous is not None else ()
            pod = pods_by_name.get(gone.pod)
            reason = pod.loss_reason if pod is not None else "deleted"
            failovers.append((gone, reason, moved))
            if moved:
                ctl.last_failover = Failover(now_iso(), gone.id, reason, moved, time.monotonic() - started)
        message = channel.AssignmentMessage(spec.name, new, tuple(executors), now_iso(), cause)
        owner = Owner(spec.name, snap.streamapp["metadata"]["uid"])
        data = channel.encode_assignment(message)
        if ctl.last_failover is not None:
            data[FAILOVER_KEY] = json.dumps(ctl.last_failover.to_status(), sort_keys=True)
        cm = builders.build_assignment_configmap(spec, owner, data)
        await asyncio.to_thread(self.kube.apply, cm)
        elapsed = time.monotonic() - started
        ctl.message = message
        metrics.ASSIGNMENTS_PUBLISHED.labels(spec.namespace, spec.name).inc()
        metrics.ASSIGNMENT_GENERATION.labels(spec.namespace, spec.name).set(new.generation)
        log.info(
            "app %s/%s: assignment generation %d published in %.1f ms (%s)",
            spec.namespace,
            spec.name,
            new.generation,
            elapsed * 1000,
            cause,
        )

        pods_by_id = {e.id: e.pod for e in executors}
        for gone, reason, moved in failovers:
            self._event(
                snap.streamapp,
                "Warning",
                "ExecutorLost",
                f"executor {gone.id} ({gone.pod}) {reason}; {len(moved)} active task(s) failed over",
            )
            if moved:
                metrics.FAILOVERS.labels(spec.namespace, spec.name).inc()
                metrics.FAILOVER_DURATION.labels(spec.namespace, spec.name).observe(elapsed)
        if previous is None:
            self._event(
                snap.streamapp,
                "Normal",
                "AssignmentPublished",
                f"generation {new.generation}: {len(new.tasks)} task(s) on {len(executors)} executor(s)",
            )
        else:
            for reason, text in describe_moves(diff(previous, new), pods_by_id):
                self._event(snap.streamapp, "Normal", reason, f"generation {new.generation}: {text}")

    async def _update_status(
        self,
        ctl: AppController,
        snap: Snapshot,
        spec: StreamAppSpec | None,
        executors: list[Executor],
        runtime: channel.RuntimeState | None,
        spec_error: str | None = None,
    ) -> None:
        meta = snap.streamapp["metadata"]
        app = meta["name"]
        drivers = [p for p in snap.pods if p.role == "driver" and not p.deleting]
        desired = (
            spec.executors.replicas
            if spec is not None
            else int(((snap.streamapp.get("spec") or {}).get("executors") or {}).get("replicas") or 0)
        )
        assignment: Assignment | None = ctl.message.assignment if ctl.message is not None else None
        observed = Observed(
            now=now_iso(),
            generation=meta.get("generation"),
            selector=builders.label_selector_string(builders.executor_selector(app)),
            desired_executors=desired,
            ready_executors=len(executors),
            standby_replicas=spec.state.standby_replicas if spec is not None else 0,
            driver_pod=drivers[0].name if drivers else None,
            driver_ready=bool(drivers) and drivers[0].phase == "Running" and drivers[0].ready,
            assignment=assignment,
            runtime=runtime,
            last_failover=ctl.last_failover,
            spec_error=spec_error,
        )
        previous = ctl.last_status if ctl.last_status is not None else snap.streamapp.get("status")
        status = compute_status(observed, previous)
        metrics.set_app_gauges(meta["namespace"], app, status)
        if ctl.last_status is not None and without_times(status) == without_times(ctl.last_status):
            return
        await asyncio.to_thread(self.kube.patch_status, meta["namespace"], app, status)
        ctl.last_status = status
