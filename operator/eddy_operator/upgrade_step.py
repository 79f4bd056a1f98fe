"""The operator's Upgrade step (docs/DESIGN.md, "The operator's part"; docs/operations.md,
"Upgrading an app"): the wanted version's topology gate and health gate, judged by `upgrades`
(pure), carried out here: a healthy version recorded as such, a rejected one recorded, said in
Events, and rolled back to the last healthy version (`reconcile` applies it, and the rejected
driver pod goes); and the rolling upgrade's pod replacements, chosen by `rollout` (pure): an
outdated executor pod deleted once its actives are on warm copies elsewhere."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace

from eddy_contract import channel
from eddy_contract.spec import StreamAppSpec
from eddy_operator import metrics
from eddy_operator.app_state import AppController, EventPoster, Snapshot, now_iso
from eddy_operator.builders import Owner
from eddy_operator.kube import Kube
from eddy_operator.reconcile import reconcile, write_versions
from eddy_operator.rollout import replaceable, replacing
from eddy_operator.upgrades import RejectionKind, VersionBook, driver_seen, judge

__all__ = ["judge_upgrade", "replace_outdated"]

log = logging.getLogger(__name__)


async def judge_upgrade(kube: Kube, event: EventPoster, snap: Snapshot, spec: StreamAppSpec,
                        runtime: channel.RuntimeState | None) -> None:
    """The wanted version's topology gate and health gate (eddy_operator.upgrades): record it as
    healthy, or reject it, say so, and roll the driver back to the healthy version."""
    book = VersionBook.from_data(snap.versions_data)
    gate_text = (snap.runtime_data or {}).get(channel.UPGRADE_KEY)
    try:
        gate = json.loads(gate_text) if gate_text else None
    except ValueError:
        gate = None
    verdict = judge(book, driver_seen(snap.pods, runtime), gate, now=now_iso(),
                    health_timeout_s=spec.upgrade.health_timeout_s, rollback=spec.upgrade.rollback)
    wanted = book.wanted
    if wanted is None or (verdict.healthy is None and verdict.rejection is None):
        return
    owner = Owner(spec.name, snap.streamapp["metadata"]["uid"])
    if verdict.healthy is not None:
        before = book.healthy
        await asyncio.to_thread(write_versions, kube, spec, owner, replace(book, healthy=verdict.healthy))
        if before is not None:
            event(snap.streamapp, "Normal", "Upgraded",
                        f"version {wanted.hash} runs healthily (was {before.hash}); no record waited for it")
        return
    rejection = verdict.rejection
    assert rejection is not None
    await asyncio.to_thread(write_versions, kube, spec, owner,
                            replace(book, rejected={**book.rejected, wanted.hash: rejection}))
    reason = "UpgradeRefused" if rejection.kind == RejectionKind.REFUSED else "UpgradeFailed"
    event(snap.streamapp, "Warning", reason, f"version {wanted.hash}: {rejection.reason}")
    if rejection.rolled_back_to is not None:
        event(snap.streamapp, "Warning", "RolledBack",
                    f"back to version {rejection.rolled_back_to}, the last that ran healthily; {wanted.hash} is "
                    "not tried again until the spec changes")
        await asyncio.to_thread(reconcile, kube, snap.streamapp)
        # A StatefulSet does not replace a pod that never became ready with its reverted
        # template by itself (Kubernetes' "forced rollback"): the rejected driver pod goes.
        for pod in snap.pods:
            if pod.role == "driver" and pod.config_hash == wanted.hash and not pod.deleting:
                await asyncio.to_thread(kube.core.delete_namespaced_pod, pod.name, spec.namespace)
    log.warning("app %s/%s: version %s %s: %s", spec.namespace, spec.name, wanted.hash, rejection.kind,
                rejection.reason)


async def replace_outdated(kube: Kube, event: EventPoster, ctl: AppController, snap: Snapshot, spec: StreamAppSpec,
                           runtime: channel.RuntimeState) -> None:
    """A rolling upgrade's next step (eddy_operator.rollout): the outdated executor pod being
    replaced is deleted once the published assignment gives it no copy and the driver runs it; the
    StatefulSet makes it again at the new template. Its preStop hook holds the stop until its
    runner has let its actives go."""
    replicas = spec.executors.replicas
    pod = replacing(snap.pods, spec.name, replicas)
    if pod is None or ctl.message is None:
        return
    taken = runtime.assignment_generation == ctl.message.assignment.generation
    if not replaceable(pod, ctl.message.assignment, taken, replicas):
        return
    if not await asyncio.to_thread(kube.delete_pod, spec.namespace, pod.name, pod.uid):
        return
    metrics.PODS_REPLACED.labels(spec.namespace, spec.name).inc()
    held = ("was not running" if pod.phase != "Running" else "is the app's only executor: no copy elsewhere to "
            "hand its tasks to" if replicas <= 1 else "held no copy: every active it had is on a caught-up copy")
    event(snap.streamapp, "Normal", "ExecutorReplaced",
          f"pod {pod.name} (executor {pod.exec_id}), at the old pod template, deleted: it {held}; the "
          "StatefulSet makes it again at the new one")
    log.info("app %s/%s: rolling upgrade: replaced pod %s", spec.namespace, spec.name, pod.name)
