"""The operator's Scale step, and the drain's last move (docs/DESIGN.md, "The operator's part"):
executors that leave (on a node being drained, or past the wanted count) are announced; a drained
executor's pod is deleted once it holds no copy and the driver runs that assignment; a scale-in
shrinks the executor StatefulSet only then; and the autoscaler samples the executors' load and
scales the app through its scale subresource. The pure parts (what is surplus, what holds a
recommendation back, the status figures) are `scaling`'s; the model is `autoscaler`'s."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from kubernetes.client.exceptions import ApiException

from eddy_contract import channel
from eddy_contract.assignor import Assignment, Executor
from eddy_contract.spec import StreamAppSpec
from eddy_operator import builders, metrics
from eddy_operator.app_state import AppController, EventPoster, Snapshot, now_iso
from eddy_operator.autoscaler import decide, rates, recommend
from eddy_operator.drains import drained, emptied
from eddy_operator.kube import Kube
from eddy_operator.scaling import autoscaling_status, load_sample, surplus, warming

__all__ = ["announce_leaving", "autoscale", "evict_drained", "scale_in"]

log = logging.getLogger(__name__)


def announce_leaving(event: EventPoster, ctl: AppController, snap: Snapshot, executors: list[Executor],
                     why: Mapping[str, tuple[str, str]], previous: Assignment | None) -> None:
    """An Event for each executor that has just become leaving, so that each is said once (`why`:
    executor -> the Event's reason and why it leaves: `Draining` on a node being drained, `Leaving`
    past the wanted count, `Replacing` at the old pod template of a rolling upgrade)."""
    pods = {e.id: e.pod for e in executors}
    for executor in sorted(set(why) - ctl.leaving):
        actives = len(previous.active_tasks(executor)) if previous is not None else 0
        what = (f"its {actives} active task(s) go to caught-up copies elsewhere first (warmups where none is)"
                if actives else "it holds no active task")
        reason, because = why[executor]
        event(snap.streamapp, "Normal", reason, f"executor {executor} ({pods[executor]}) is {because}: {what}, "
                                                "then the pod goes")
    ctl.leaving = frozenset(why)


async def evict_drained(kube: Kube, event: EventPoster, ctl: AppController, snap: Snapshot, spec: StreamAppSpec,
                        runtime: channel.RuntimeState) -> None:
    """Delete the executor pods on nodes being drained once the published assignment gives them
    no copy and the driver runs it (eddy_operator.drains): the evicting tool then finds them gone and goes on. Their
    preStop hook holds the stop until their runner has let its actives go."""
    if ctl.message is None or not snap.draining_nodes:
        return
    taken = runtime.assignment_generation == ctl.message.assignment.generation
    for pod in drained(snap.pods, snap.draining_nodes, ctl.message.assignment, taken):
        if not await asyncio.to_thread(kube.delete_pod, spec.namespace, pod.name, pod.uid):
            continue
        metrics.PODS_DRAINED.labels(spec.namespace, spec.name).inc()
        held = "held no copy" if pod.phase == "Running" else "was not running"
        event(snap.streamapp, "Normal", "ExecutorDrained",
                    f"pod {pod.name} (executor {pod.exec_id}) on node {pod.node}, which is being drained, deleted: "
                    f"it {held}, every active it had is on a caught-up copy; the drain can go on")
        log.info("app %s/%s: drained pod %s off node %s", spec.namespace, spec.name, pod.name, pod.node)


async def scale_in(kube: Kube, event: EventPoster, ctl: AppController, snap: Snapshot, spec: StreamAppSpec,
                   runtime: channel.RuntimeState) -> None:
    """Fewer executors wanted (`kubectl scale`, the autoscaler): the pods past the wanted count
    are leaving executors (their actives go to caught-up copies first, as in a drain); once they
    hold no copy and the driver runs that assignment, the executor StatefulSet is scaled down
    and its controller deletes them (their preStop hook waits for their runners to let go)."""
    going = surplus(snap.pods, spec)
    if ctl.message is None or not going:
        return
    taken = runtime.assignment_generation == ctl.message.assignment.generation
    pods = [p for p in snap.pods if p.name in going]
    if len(emptied(pods, ctl.message.assignment, taken)) < len([p for p in pods if not p.deleting]):
        return
    name = builders.executor_statefulset_name(spec.name)
    await asyncio.to_thread(kube.scale_statefulset, spec.namespace, name, spec.executors.replicas)
    event(snap.streamapp, "Normal", "ScaledIn",
                f"{', '.join(sorted(going))} hold no copy (their actives are on caught-up copies): executor "
                f"StatefulSet scaled to {spec.executors.replicas}")
    log.info("app %s/%s: scaled in to %d executors", spec.namespace, spec.name, spec.executors.replicas)


async def autoscale(kube: Kube, event: EventPoster, ctl: AppController, snap: Snapshot, spec: StreamAppSpec,
                    executors: list[Executor], runtime: channel.RuntimeState | None) -> None:
    """spec.autoscaling: sample the executors' load, recommend, and scale through the scale
    subresource when the stabilization windows agree (eddy_operator.autoscaler)."""
    a = spec.autoscaling
    if not a.enabled or runtime is None:
        ctl.autoscaling = None
        return
    now = time.time()
    sample = load_sample(runtime)
    if sample is not None and (not ctl.samples or sample.at > ctl.samples[-1].at):
        ctl.samples = [s for s in ctl.samples if s.at >= sample.at - 2 * a.window_s] + [sample]
    current = spec.executors.replicas
    figures = rates(ctl.samples, a.window_s)
    status = autoscaling_status(current, figures, (ctl.autoscaling or {}).get("lastDecision"))
    hold = warming(ctl.message, runtime, executors, current, surplus(snap.pods, spec))
    if hold is not None:
        # lag a move causes is no evidence: the windows start over once it is done
        ctl.history.clear()
        status["holding"] = hold
    elif figures is not None:
        n, why = recommend(figures, current, a, observed=ctl.history.observe(now, figures))
        ctl.history.add(now, n, keep_s=max(a.scale_in_stabilization_s, a.scale_out_stabilization_s) + a.window_s)
        status.update(recommended=n, reason=why)
        decision = decide(ctl.history, now, current, a)
        if decision is not None:
            try:
                await asyncio.to_thread(kube.scale_streamapp, spec.namespace, spec.name, decision.target)
            except ApiException as err:
                # the app goes on as it is; the decision is taken again at the next sync
                event(snap.streamapp, "Warning", "AutoscalingFailed",
                            f"executors {decision.current} -> {decision.target} could not be set: {err.reason} "
                            f"({err.status})")
                status["holding"] = f"the scale subresource refused: {err.reason} ({err.status})"
                ctl.autoscaling = status
                return
            message = (f"executors {decision.current} -> {decision.target}: {decision.reason}; {why}; "
                       f"{figures.describe()}")
            event(snap.streamapp, "Normal", "Autoscaled", message)
            metrics.AUTOSCALER_DECISIONS.labels(spec.namespace, spec.name,
                                                "out" if decision.target > current else "in").inc()
            log.info("app %s/%s: autoscaler: %s", spec.namespace, spec.name, message)
            status["lastDecision"] = {"time": now_iso(), "from": decision.current, "to": decision.target,
                                      "reason": f"{decision.reason}; {why}"}
            ctl.history.clear()
            ctl.samples = []
        metrics.AUTOSCALER_RECOMMENDED.labels(spec.namespace, spec.name).set(n)
    ctl.autoscaling = status
