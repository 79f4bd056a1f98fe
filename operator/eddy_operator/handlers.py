"""The kopf handlers: thin glue from Kubernetes events to reconcile, assignment and status
(docs/DESIGN.md, "The operator's part").

Run with `kopf run -m eddy_operator.handlers --all-namespaces` (or `eddy-operator`). The work
happens in `reconcile` (objects), `orchestrator` (assignor, failover, events, status) and
`status`; the handlers only gather what kopf's indexes hold and pass it on.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import kopf

from eddy_contract import channel
from eddy_contract.spec import GROUP, KIND, PLURAL, VERSION, SpecError
from eddy_operator import builders, health, metrics
from eddy_operator.app_state import Snapshot
from eddy_operator.drains import is_draining
from eddy_operator.kube import Kube
from eddy_operator.node_loss import down_since
from eddy_operator.orchestrator import Orchestrator
from eddy_operator.pods import pod_info, zone_of
from eddy_operator.reachability import (
    PROBE_INTERVAL_S,
    Reachability,
    answer_timeout_s,
    metrics_port,
    probe,
    probe_targets,
    unreachable_after_s,
)
from eddy_operator.reconcile import clean_up, reconcile

log = logging.getLogger(__name__)

APP_PODS = {builders.APP_LABEL: kopf.PRESENT}
CHANNELS = {channel.LABEL_CHANNEL: kopf.PRESENT, builders.APP_LABEL: kopf.PRESENT}
RESYNC_SECONDS = float(os.environ.get("EDDY_OPERATOR_RESYNC_SECONDS", "30"))


#: a context in which kopf can post Events. kopf sets its Event poster's queue only inside its
#: resource handlers; the resync and probe loops run in the startup handler's context, where
#: kopf.event raises LookupError, and the Events of the syncs they started (an executor lost to the
#: probe, a node lost; found by bench/chaos.py) were dropped. Those post through this one.
_posting: contextvars.Context | None = None


def remember_posting_context() -> None:
    """Called in resource handlers: keep their context for Events posted from outside one."""
    global _posting
    _posting = contextvars.copy_context()


def _post_event(body: Any, type_: str, reason: str, message: str) -> None:
    try:
        kopf.event(body, type=type_, reason=reason, message=message)
    except LookupError:
        if _posting is None:  # no resource handler has run yet: nothing can post
            raise
        _posting.run(kopf.event, body, type=type_, reason=reason, message=message)


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In a pod: its ServiceAccount. Elsewhere: $KUBECONFIG, read now rather than when the
    kubernetes client was first imported (which is what kopf's default login would use)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    # Progress and diff-base in annotations: the status schema is ours, not kopf's.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # kopf's own log lines become Events only from WARNING up; ours are posted explicitly.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    memo.kube = Kube()
    memo.orchestrator = Orchestrator(memo.kube, post_event=_post_event)
    port = int(os.environ.get("EDDY_OPERATOR_METRICS_PORT", "8080"))
    memo.metrics_server = (
        metrics.serve(os.environ.get("EDDY_OPERATOR_METRICS_ADDRESS", "0.0.0.0"), port) if port >= 0 else None
    )
    memo.resync_round_at = time.monotonic()  # the liveness probe watches this move
    # The indexes are empty now and filled by kopf as its watches list the cluster.
    memo.resync_task = asyncio.create_task(_resync_forever(memo, _indexes(kwargs)))
    after_s = unreachable_after_s()
    memo.reachability = Reachability(after_s) if after_s > 0 else None
    memo.probe_task = asyncio.create_task(_probe_forever(memo, _indexes(kwargs))) if after_s > 0 else None


async def _resync_forever(memo: kopf.Memo, indexes: dict[str, Any]) -> None:
    """A safety net for events missed while a watch restarted: every app, every so often. An
    operator-wide loop rather than a kopf timer, because per-object timers put a finalizer on
    every StreamApp, and an app should not need a running operator to be deleted."""
    while True:
        await asyncio.sleep(RESYNC_SECONDS)
        for namespace, app in list(indexes["streamapps_idx"]):
            try:
                await _sync(memo, namespace, app, "resync", time.monotonic(), **indexes)
            except Exception:  # one broken app must not stop the others' resync
                log.exception("resync of %s/%s failed", namespace, app)
        memo.resync_round_at = time.monotonic()


async def _probe_forever(memo: kopf.Memo, indexes: dict[str, Any]) -> None:
    """Ask every app's executors' runners whether they are there (eddy_operator.reachability), and
    sync an app at once when one of its executors stops answering or answers again."""
    reachability: Reachability = memo.reachability
    reported: dict[tuple[str, str], frozenset[str]] = {}
    while True:
        await asyncio.sleep(PROBE_INTERVAL_S)
        try:
            apps = {key: _one(indexes["streamapps_idx"], key) for key in list(indexes["streamapps_idx"])}
            pods = {key: tuple(indexes["pods_idx"].get(key, ())) for key in apps}
            targets = {}
            for key, streamapp in apps.items():
                if streamapp is not None:
                    targets.update(probe_targets(pods[key], metrics_port(streamapp)))
            answers = await probe(targets, timeout_s=answer_timeout_s(reachability.after_s))
            now = time.monotonic()
            for target, answered in answers.items():
                reachability.record(target, answered, now)
            reachability.keep_only(targets)
            for key in apps:
                silent = reachability.unreachable(pods[key], now)
                if frozenset(silent) != reported.get(key, frozenset()):
                    reported[key] = frozenset(silent)
                    what = ", ".join(f"{pod} silent for {s:.1f}s" for pod, s in sorted(silent.items())) or "all answer"
                    log.info("app %s/%s: executors' runners: %s", *key, what)
                    await _sync(memo, key[0], key[1], f"executor probes: {what}", now, **indexes)
        except Exception:  # noqa: BLE001 - a probe round that failed must not end the probing
            log.exception("probing the executors failed")


@kopf.on.probe(id="handlers")
async def handlers_alive(memo: kopf.Memo, **_: Any) -> str:
    """Fails kopf's liveness endpoint when the handlers could no longer act (see `health`)."""
    if not await health.executor_responds():
        raise kopf.PermanentError("the handlers' thread pool runs nothing (every worker is stuck)")
    problem = health.resync_problem(memo.get("resync_round_at", time.monotonic()), time.monotonic(), RESYNC_SECONDS)
    if problem is not None:
        raise kopf.PermanentError(problem)
    return "ok"


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    for name in ("resync_task", "probe_task"):
        task = memo.get(name)
        if task is not None:
            task.cancel()
    if memo.get("metrics_server") is not None:
        await asyncio.to_thread(metrics.shutdown)


# --- indexes: the operator's view of the cluster, kept current by kopf's watches -------------


@kopf.index(GROUP, VERSION, PLURAL)
def streamapps_idx(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    assert namespace is not None
    return {
        (namespace, name): {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": body.metadata.uid,
                "generation": body.metadata.get("generation"),
            },
            "spec": dict(body.spec),
            "status": dict(body.status),
        }
    }


@kopf.index("v1", "pods", labels=APP_PODS)
def pods_idx(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    assert namespace is not None
    return {(namespace, labels[builders.APP_LABEL]): pod_info(body)}


@kopf.index("v1", "nodes")
def nodes_idx(name: str, labels: kopf.Labels, **_: Any) -> dict[Any, Any]:
    return {name: dict(labels)}


# Every node has a value in these two (None, False): kopf keeps an object's last value when its
# indexing function returns None, so a node that came back up would stay down in the index.
@kopf.index("v1", "nodes")
def down_nodes_idx(name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """When each node went down (not Ready), None if it is up (eddy_operator.node_loss)."""
    return {name: down_since(body)}


@kopf.index("v1", "nodes")
def draining_nodes_idx(name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Whether each node is being drained: cordoned, or tainted for removal (eddy_operator.drains)."""
    return {name: is_draining(body)}


@kopf.on.event("v1", "nodes")
async def node_event(name: str, body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    """A node being drained or down: sync the apps with pods on it at once (a cordon changes no
    pod, so no pod event would say it)."""
    remember_posting_context()  # nodes report every few seconds: a fresh handler context
    if not is_draining(body) and down_since(body) is None:
        return
    indexes = _indexes(kwargs)
    for namespace, app in {key for key, pods in indexes["pods_idx"].items() if any(p.node == name for p in pods)}:
        await _sync(memo, namespace, app, f"node {name} draining or down", time.monotonic(), **indexes)


@kopf.index("v1", "configmaps", labels=CHANNELS)
def channels_idx(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    assert namespace is not None
    key = (namespace, labels[builders.APP_LABEL], labels[channel.LABEL_CHANNEL])
    return {key: dict(body.get("data") or {})}


def _one(index: kopf.Index[Any, Any], key: Any) -> Any:
    for value in index.get(key, ()):
        return value
    return None


def _each(index: kopf.Index[Any, Any]) -> Iterator[tuple[Any, Any]]:
    """Each key of an index with its one value."""
    for key in index:
        yield key, _one(index, key)


def snapshot(namespace: str | None, app: str, indexes: dict[str, kopf.Index[Any, Any]],
             reachability: Reachability | None = None) -> Snapshot | None:
    streamapp = _one(indexes["streamapps_idx"], (namespace, app))
    if streamapp is None:
        return None
    pods = tuple(indexes["pods_idx"].get((namespace, app), ()))
    return Snapshot(
        streamapp=streamapp,
        pods=pods,
        nodes={name: _one(indexes["nodes_idx"], name) or {} for name in indexes["nodes_idx"]},
        down_nodes={name: since for name, since in _each(indexes["down_nodes_idx"]) if since},
        draining_nodes=frozenset(name for name, draining in _each(indexes["draining_nodes_idx"]) if draining),
        runtime_data=_one(indexes["channels_idx"], (namespace, app, "runtime-state")),
        assignment_data=_one(indexes["channels_idx"], (namespace, app, "assignment")),
        versions_data=_one(indexes["channels_idx"], (namespace, app, "versions")),
        unreachable=reachability.unreachable(pods, time.monotonic()) if reachability is not None else {},
    )


async def _sync(memo: kopf.Memo, namespace: str | None, app: str, cause: str, started: float, **indexes: Any) -> None:
    snap = snapshot(namespace, app, indexes, memo.get("reachability"))
    if snap is not None:
        await memo.orchestrator.sync(snap, cause, started)


# --- the StreamApp ------------------------------------------------------------------------


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
async def reconcile_streamapp(
    body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, reason: str, **kwargs: Any
) -> None:
    remember_posting_context()
    started = time.monotonic()
    try:
        result = await asyncio.to_thread(reconcile, memo.kube, body)
    except SpecError as err:
        metrics.RECONCILES.labels("error").inc()
        metrics.RECONCILE_ERRORS.inc()
        kopf.event(body, type="Warning", reason="InvalidSpec", message=str(err))
        await _sync(memo, namespace, name, f"{reason}: invalid spec", started, **_indexes(kwargs))
        raise kopf.PermanentError(str(err)) from err
    except Exception:
        metrics.RECONCILES.labels("error").inc()
        metrics.RECONCILE_ERRORS.inc()
        raise
    finally:
        metrics.RECONCILE_DURATION.observe(time.monotonic() - started)
    metrics.RECONCILES.labels("success").inc()
    if reason != "resume":
        kopf.event(
            body, type="Normal", reason="Reconciled", message=f"{len(result.applied)} objects applied ({reason})"
        )
    await _sync(memo, namespace, name, reason, started, **_indexes(kwargs))


def _deletes_volumes(spec: kopf.Spec, **_: Any) -> bool:
    return not (spec.get("state") or {}).get("retainVolumesOnDelete", True)


# Only apps that want their volumes deleted carry a finalizer: the others never wait for the
# operator to be running before they can go (their owned objects go with the garbage collector).
@kopf.on.delete(GROUP, VERSION, PLURAL, when=_deletes_volumes)
async def delete_volumes(body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    deleted = await asyncio.to_thread(clean_up, memo.kube, body)
    log.info("%s/%s: deleted state volumes %s", namespace, name, deleted)


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
async def forget_streamapp(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    await memo.orchestrator.forget(namespace, name)


# --- executor and driver pods, runtime state ------------------------------------------------


@kopf.on.event("v1", "pods", labels=APP_PODS)
async def app_pod_event(
    event: kopf.RawEvent,
    body: kopf.Body,
    namespace: str | None,
    name: str,
    labels: kopf.Labels,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    started = time.monotonic()
    app = labels[builders.APP_LABEL]
    indexes = _indexes(kwargs)
    await _sync(memo, namespace, app, f"pod {name} {str(event.get('type') or 'listed').lower()}", started, **indexes)
    if event.get("type") != "DELETED":
        await _label_zone(memo, namespace, app, body, indexes)


async def _label_zone(
    memo: kopf.Memo, namespace: str | None, app: str, body: kopf.Body, indexes: dict[str, Any]
) -> None:
    """Show an executor's zone on its pod (the template cannot know it before scheduling)."""
    info = pod_info(body)
    streamapp = _one(indexes["streamapps_idx"], (namespace, app))
    if info.role != "executor" or info.node is None or streamapp is None or info.deleting:
        return
    zone_key = ((streamapp["spec"].get("executors") or {}).get("zoneTopologyKey")) or "topology.kubernetes.io/zone"
    zone = zone_of(info.node, {info.node: _one(indexes["nodes_idx"], info.node) or {}}, zone_key)
    if zone is not None and info.zone_label != zone:
        await asyncio.to_thread(memo.kube.label_pod, namespace, info.name, {builders.ZONE_LABEL: zone})


@kopf.on.event("v1", "configmaps", labels={channel.LABEL_CHANNEL: "runtime-state", builders.APP_LABEL: kopf.PRESENT})
async def runtime_state_event(namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, **kwargs: Any) -> None:
    await _sync(memo, namespace, labels[builders.APP_LABEL], "runtime state", time.monotonic(), **_indexes(kwargs))


def _indexes(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: kwargs[k] for k in ("streamapps_idx", "pods_idx", "nodes_idx", "down_nodes_idx", "draining_nodes_idx",
                                   "channels_idx")}
