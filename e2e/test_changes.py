"""Changes of a running app on a real node, on an app of its own while input flows (docs/operations.md,
"Upgrading an app"): each record's lateness is measured from its send to its count being visible
(`e2e.wordcount.Flow`), and the counts are checked exactly after each change.

1. an incompatible change (another store name) refused while the old version keeps running: the
   condition and the Event name the store;
2. a version whose driver crash-loops fails its health gate and is rolled back.

A driver pod deleted is e2e/test_driver_restart.py's, on an app of its own: in the runs of
2026-11-27, a refused change after a driver deletion on the same app (and a driver deletion after
executor losses on test_real_pods.py's app) left records of the flow uncounted for over two
minutes; the cause is not found yet (each change on a fresh app passed). The compatible image
upgrade (executor pods replaced one warm pod at a time) is not tested end to end yet: on this
machine it has not passed (the 120 s health gate, since 300 s, rolled it back).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
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
