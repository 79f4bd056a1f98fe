"""The operator's orchestration of each app: from its pods, nodes and the driver's runtime state
to a published assignment, failover record, Events, status and metrics (docs/DESIGN.md, "The
operator's part": Assign, React, Report); each sync then runs the Scale step (`scale_step`) and
the Upgrade step (`upgrade_step`) on the same snapshot.

Called by the handlers on every executor-pod event, runtime-state change and StreamApp change.
One `AppController` per app serialises the work with a lock and remembers the last published
assignment (the assignor's `previous`), so that a lost executor's tasks are promoted to their
freshest standbys in one step: pod event -> assign -> one ConfigMap apply. Pods are read by
`eddy_operator.pods`, Events worded by `eddy_operator.assignment_events`; the apiserver is
reached through `eddy_operator.kube`.

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
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from eddy_contract import channel
from eddy_contract.assignor import (
    Assignment,
    AssignmentError,
    AssignorSettings,
    Executor,
    assign_app,
    diff,
    running_actives,
)
from eddy_contract.spec import SpecError, StreamAppSpec
from eddy_contract.tasks import Role
from eddy_operator import builders, metrics
from eddy_operator.app_state import AppController, AppKey, Snapshot, now_iso
from eddy_operator.assignment_events import describe_moves
from eddy_operator.builders import Owner
from eddy_operator.drains import hands_over, leaving
from eddy_operator.driverless import hand_over_without_driver
from eddy_operator.executor_ids import (
    REREGISTRATION_GRACE_S,
    carried_ids,
    driver_life_started,
    held_by_live_id,
    renamed,
    reregistering,
)
from eddy_operator.handover_pace import paced, settled
from eddy_operator.kube import Kube
from eddy_operator.node_loss import HOSTNAME_LABEL, release, release_unplaceable, stranded, unplaceable
from eddy_operator.pods import LostExecutor, instant, live_executors, lost_executors
from eddy_operator.rollout import replacing
from eddy_operator.scale_step import announce_leaving, autoscale, evict_drained, scale_in
from eddy_operator.scaling import surplus, unknown_to_driver
from eddy_operator.status import Failover, Observed, compute_status, without_times
from eddy_operator.upgrade_step import judge_upgrade, replace_outdated
from eddy_operator.upgrades import VersionBook

log = logging.getLogger(__name__)

# Beside the assignment in its ConfigMap; read by the operator only (the driver reads ASSIGNMENT_KEY).
FAILOVER_KEY = "last-failover.json"
#: the executor pods' id labels as the leader saw them (executor_ids.Incarnations.labels_seen)
LABELS_KEY = "executor-labels.json"


class Orchestrator:
    """Keeps every app's assignment, status and metrics in step with what is observed."""

    def __init__(self, kube: Kube, post_event: Any = None) -> None:
        self.kube = kube
        # Keyed by uid too: an app deleted and re-created under its name starts afresh even if
        # the operator missed the deletion.
        self.apps: dict[AppKey, AppController] = {}
        # post_event(body, type, reason, message): kopf.event inside handlers; None to skip.
        self.post_event = post_event
        # whether drained nodes are emptied by the hand-over (eddy_operator.drains), or evicted plainly
        self.hand_over = hands_over()

    def controller(self, namespace: str, app: str, uid: str) -> AppController:
        for key in [k for k in self.apps if (k.namespace, k.app) == (namespace, app) and k.uid != uid]:
            del self.apps[key]
        return self.apps.setdefault(AppKey(namespace, app, uid), AppController())

    async def forget(self, namespace: str, app: str) -> None:
        """A deleted app: its controllers and series go, once any sync of it in flight has ended
        (one that ended after would set its gauges again: a ghost app on the dashboards)."""
        for key in [k for k in self.apps if (k.namespace, k.app) == (namespace, app)]:
            async with self.apps[key].lock:
                self.apps.pop(key, None)
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
            if self.apps.get(AppKey(namespace, app, meta["uid"])) is not ctl:
                return  # forgotten (deleted) while this sync waited
            if not ctl.loaded:  # what the last leader published, before this one judges any pod
                ctl.message = self._decode_previous(snap, app)
                if ctl.message is not None:
                    ctl.incarnations.learn(ctl.message)
                    ctl.recent_hosts = frozenset(ctl.message.hosts.values())
                ctl.incarnations.learn_labels(self._decode_labels(snap, app))
                ctl.last_failover = self._decode_failover(snap, app)
                ctl.loaded = True
            runtime = self._runtime_state(snap, app)
            snap = replace(snap, pods=ctl.incarnations.mark(
                snap.pods, keep=[(e.pod, e.id) for e in ctl.message.executors] if ctl.message is not None else [],
                runtime=runtime))
            try:
                spec = StreamAppSpec.from_manifest(snap.streamapp)
            except SpecError as err:
                await self._update_status(ctl, snap, None, [], None, spec_error=str(err))
                return
            await self._release_stranded(snap, spec)
            executors = live_executors(snap.pods, snap.nodes, spec.executors.zone_topology_key, snap.down_nodes,
                                       snap.unreachable)
            ctl.reported_lost -= {(e.id, e.pod) for e in executors}  # back (its runner answers again): not lost
            if runtime is not None and runtime.changelog_end_offsets and executors \
                    and not self._awaiting_registrations(ctl, snap, app):
                await self._assign(ctl, snap, spec, executors, runtime, cause, started)
                if self.hand_over:
                    await evict_drained(self.kube, self._event, ctl, snap, spec, runtime)
                await scale_in(self.kube, self._event, ctl, snap, spec, runtime)
                await replace_outdated(self.kube, self._event, ctl, snap, spec, runtime)
            elif not executors:
                self._report_losses(ctl, snap, spec)
            await hand_over_without_driver(self.kube, self._event, ctl, snap, spec, runtime)
            await autoscale(self.kube, self._event, ctl, snap, spec, executors, runtime)
            await self._publish_live_settings(ctl, snap, spec)
            await judge_upgrade(self.kube, self._event, snap, spec, runtime)
            await self._update_status(ctl, snap, spec, executors, runtime)

    async def _release_stranded(self, snap: Snapshot, spec: StreamAppSpec) -> None:
        """The app's pods on a node down for `spec.state.nodeLossTimeout` go, and with them the claims
        of volumes that live only on that node (eddy_operator.node_loss): the StatefulSets make them
        again on live nodes. Their tasks failed over when the executors were lost. So do executor
        pods unschedulable for as long because their volume lives only on a node gone, down or
        being drained."""
        hostnames = {node: labels.get(HOSTNAME_LABEL, node) for node, labels in snap.nodes.items()}
        for s in stranded(snap.pods, snap.down_nodes, datetime.now(UTC), spec.state.node_loss_timeout_s):
            # None: gone already (the pod index may hold a deleted pod for a while)
            done = await asyncio.to_thread(release, self.kube, spec.namespace, s, hostnames)
            if done is None:
                continue
            metrics.PODS_OFF_LOST_NODES.labels(spec.namespace, spec.name).inc()
            self._event(snap.streamapp, "Warning", "NodeLost", done.describe())
            log.warning("app %s/%s: %s", spec.namespace, spec.name, done.describe())
        usable = {labels.get(HOSTNAME_LABEL, node) for node, labels in snap.nodes.items()
                  if node not in snap.down_nodes and node not in snap.draining_nodes}
        for u in unplaceable(snap.pods, datetime.now(UTC), spec.state.node_loss_timeout_s):
            said = await asyncio.to_thread(release_unplaceable, self.kube, spec.namespace, u, usable)
            if said is None:
                continue
            metrics.PODS_OFF_LOST_NODES.labels(spec.namespace, spec.name).inc()
            self._event(snap.streamapp, "Warning", "VolumeReleased", said)
            log.warning("app %s/%s: %s", spec.namespace, spec.name, said)

    @staticmethod
    def _awaiting_registrations(ctl: AppController, snap: Snapshot, app: str) -> bool:
        """A new driver is up and some executor pods that outlived the last one have not registered
        with it yet (executor_ids.py's `reregistering`): no assignment until they have, or until
        `REREGISTRATION_GRACE_S` after the driver started its present life."""
        started = driver_life_started(snap.pods)
        waiting = reregistering(ctl.message, snap.pods, started)  # none without a driver
        if not waiting or started is None:
            return False
        age_s = (datetime.now(UTC) - instant(started)).total_seconds()
        if age_s >= REREGISTRATION_GRACE_S:
            return False
        log.info("app %s: executor pods %s outlived the last driver and are registering with the new one "
                 "(%.0f s after its start): no assignment until they have", app, waiting, age_s)
        return True

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

    def _decode_labels(self, snap: Snapshot, app: str) -> dict[str, str]:
        """The pods' labels a previous leader saw (LABELS_KEY), {} if none or unreadable."""
        text = (snap.assignment_data or {}).get(LABELS_KEY)
        try:
            seen = json.loads(text) if text else {}
        except ValueError as err:
            log.warning("app %s: recorded executor labels unreadable, ignored: %r", app, err)
            return {}
        return {str(k): str(v) for k, v in seen.items()} if isinstance(seen, dict) else {}

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
        pods = {p.name: p for p in snap.pods}
        renames = carried_ids(ctl.message, executors,
                              lambda old_id, pod: ctl.incarnations.carried_over(old_id, pods[pod]))
        if renames and ctl.message is not None:
            log.info("app %s: executors under new ids (a new driver), or whose ids it handed to other pods: %s",
                     spec.name, renames)
            ctl.message = renamed(ctl.message, renames)
            ctl.reported_lost = frozenset((renames.get(i, i), pod) for i, pod in ctl.reported_lost)
        previous = ctl.message.assignment if ctl.message is not None else None
        settings = AssignorSettings(
            standby_replicas=spec.state.standby_replicas,
            acceptable_recovery_lag=spec.state.acceptable_recovery_lag,
            max_warmup_replicas=spec.state.max_warmup_replicas,
        )
        stateful = [t for t, stores in runtime.changelog_end_offsets.items() if stores]
        why: dict[str, tuple[str, str]] = {}  # executor -> the Event's reason, and why it leaves
        nodes = {e.id: p.node for e in executors for p in snap.pods if p.name == e.pod}
        for e in leaving(executors, snap.pods, snap.draining_nodes) if self.hand_over else []:
            why[e] = ("Draining", f"on node {nodes.get(e)}, which is being drained (its PodDisruptionBudget holds "
                                  "evictions meanwhile)")
        extra = surplus(snap.pods, spec)
        why.update({e.id: ("Leaving", "past the wanted executor count") for e in executors
                    if e.id not in why and e.pod in extra})
        if (outdated := replacing(snap.pods, spec.name, spec.executors.replicas)) is not None:
            why.update({e.id: ("Replacing", "at the old pod template of a rolling upgrade") for e in executors
                        if e.id not in why and e.pod == outdated.name})
        going = list(why)
        going += unknown_to_driver(executors, runtime, previous, going)
        announce_leaving(self._event, ctl, snap, executors, why, previous)
        # Under new ids (a new driver) the runtime state still names the old ones: no active is
        # taken as running then, and their figures decide as for any copy.
        running = () if renames else running_actives(
            previous, runtime.assignment_generation,
            [(r.executor, r.task) for r in runtime.restores if r.role == Role.ACTIVE])
        try:
            new = assign_app(executors, runtime.end_offsets(), held_by_live_id(runtime, executors), previous, settings,
                             stateful, going, running)
        except AssignmentError as err:
            log.warning("app %s: no assignment: %s", spec.name, err)
            return
        new = paced(new, previous, [e for e, (reason, _) in why.items() if reason == "Replacing"],
                    {e.id for e in executors}, settled(ctl.message, runtime, datetime.now(UTC)))
        if previous is not None and new is previous:
            if not renames:
                return
            # the same placement under the new ids: a generation the new driver can take
            new = Assignment(previous.generation + 1, new.tasks)
        lost = lost_executors(ctl.message, executors, snap.pods, snap.down_nodes, snap.unreachable)
        # The failover is written in the same ConfigMap update as the assignment that carries it
        # out, so a leader that dies right after the write still leaves it for the next one.
        for gone in lost:
            if gone.moved:
                ctl.last_failover = Failover(now_iso(), gone.executor.id, gone.reason, gone.moved,
                                             time.monotonic() - started)
        ips = {p.exec_id: p.ip for p in snap.pods if p.live_executor and p.exec_id is not None and p.ip}
        lives = {e.id: life for e in executors if (life := ctl.incarnations.life(e.id, e.pod)) is not None}
        message = channel.AssignmentMessage(spec.name, new, tuple(executors), now_iso(), cause,
                                            {e.id: ips[e.id] for e in executors if e.id in ips}, lives)
        await self._write_channel(ctl, snap, spec, message)
        elapsed = time.monotonic() - started
        ctl.message = message
        ctl.recent_hosts |= frozenset(message.hosts.values())
        reported, ctl.reported_lost = ctl.reported_lost, frozenset()
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
        self._announce(snap, spec, executors, previous, new,
                       [g for g in lost if (g.executor.id, g.executor.pod) not in reported], elapsed)
        for gone in lost:  # reported when they were lost; their actives fail over only now
            if (gone.executor.id, gone.executor.pod) in reported and gone.moved:
                metrics.FAILOVERS.labels(spec.namespace, spec.name).inc()
                metrics.FAILOVER_DURATION.labels(spec.namespace, spec.name).observe(elapsed)

    def _report_losses(self, ctl: AppController, snap: Snapshot, spec: StreamAppSpec) -> None:
        """No executor is live (every one lost at once, or one lost while the others' pods were
        away): no assignment can take the lost executors' tasks, but each loss is reported now,
        once, not only with the assignment that fails its tasks over once an executor is back."""
        # a pod that outlived the last driver registers with the new one under a new id: not lost
        registering = set(reregistering(ctl.message, snap.pods, driver_life_started(snap.pods)))
        for gone in lost_executors(ctl.message, [], snap.pods, snap.down_nodes, snap.unreachable):
            if (gone.executor.id, gone.executor.pod) in ctl.reported_lost or gone.executor.pod in registering:
                continue
            self._event(snap.streamapp, "Warning", "ExecutorLost",
                        f"executor {gone.executor.id} ({gone.executor.pod}) {gone.reason}; no executor is live: its "
                        f"{len(gone.moved)} active task(s) fail over once one is")
            metrics.EXECUTOR_LOSSES.labels(spec.namespace, spec.name, metrics.loss_label(gone.reason)).inc()
            log.warning("app %s/%s: executor %s (%s) %s, and no executor is live", spec.namespace, spec.name,
                        gone.executor.id, gone.executor.pod, gone.reason)
            ctl.reported_lost |= {(gone.executor.id, gone.executor.pod)}

    async def _write_channel(self, ctl: AppController, snap: Snapshot, spec: StreamAppSpec,
                             message: channel.AssignmentMessage) -> None:
        """The assignment ConfigMap: `message`, the failover it carries out, and the spec's live
        settings (what a running driver takes in place)."""
        owner = Owner(spec.name, snap.streamapp["metadata"]["uid"])
        data = channel.encode_assignment(message)
        data.update(channel.encode_live_settings(channel.LiveSettings.of(spec)))
        if ctl.last_failover is not None:
            data[FAILOVER_KEY] = json.dumps(ctl.last_failover.to_status(), sort_keys=True)
        data[LABELS_KEY] = json.dumps(ctl.incarnations.labels_seen(), sort_keys=True)
        await asyncio.to_thread(self.kube.apply, builders.build_assignment_configmap(spec, owner, data))

    async def _publish_live_settings(self, ctl: AppController, snap: Snapshot, spec: StreamAppSpec) -> None:
        """A change of the settings a running driver takes in place (triggerInterval, the bad-record
        policy, acceptableRecoveryLag: docs/operations.md, "Upgrading an app") reaches it through the
        assignment ConfigMap, which it watches; no pod restarts."""
        if ctl.message is None:
            return
        wanted = channel.encode_live_settings(channel.LiveSettings.of(spec))
        if (snap.assignment_data or {}).get(channel.SETTINGS_KEY) == wanted[channel.SETTINGS_KEY]:
            return
        await self._write_channel(ctl, snap, spec, ctl.message)
        log.info("app %s/%s: live settings published: %s", spec.namespace, spec.name, wanted[channel.SETTINGS_KEY])

    def _announce(
        self,
        snap: Snapshot,
        spec: StreamAppSpec,
        executors: list[Executor],
        previous: Assignment | None,
        new: Assignment,
        lost: list[LostExecutor],
        elapsed: float,
    ) -> None:
        """Events and failover metrics for a generation just published."""
        pods_by_id = {e.id: e.pod for e in executors}
        for gone in lost:
            self._event(
                snap.streamapp,
                "Warning",
                "ExecutorLost",
                f"executor {gone.executor.id} ({gone.executor.pod}) {gone.reason}; "
                f"{len(gone.moved)} active task(s) failed over",
            )
            metrics.EXECUTOR_LOSSES.labels(spec.namespace, spec.name, metrics.loss_label(gone.reason)).inc()
            if gone.moved:
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
            for event in describe_moves(diff(previous, new), pods_by_id):
                self._event(snap.streamapp, "Normal", event.reason, f"generation {new.generation}: {event.message}")

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
        book = VersionBook.from_data(snap.versions_data)
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
            wanted_version=book.wanted.hash if book.wanted is not None else None,
            rejection=book.rejected.get(book.wanted.hash) if book.wanted is not None else None,
            autoscaling=ctl.autoscaling,
            outdated_executors=sum(p.role == "executor" and p.outdated and not p.deleting for p in snap.pods),
        )
        previous = ctl.last_status if ctl.last_status is not None else snap.streamapp.get("status")
        status = compute_status(observed, previous)
        metrics.set_app_gauges(meta["namespace"], app, status)
        if ctl.last_status is not None and without_times(status) == without_times(ctl.last_status):
            return
        await asyncio.to_thread(self.kube.patch_status, meta["namespace"], app, status)
        ctl.last_status = status
