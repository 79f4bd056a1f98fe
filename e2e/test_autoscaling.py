"""The autoscaler on real pods (docs/operations.md, "Autoscaling"): the word count with two
executors limited to a fraction of a core each and `spec.autoscaling` on (2..3 executors, short
windows, a target utilisation low enough that the feed needs three), fed for a while, then left
idle.

1. the backlog grows: the operator decides to scale out (an `Autoscaled` Event "2 -> 3" with the
   figures it took), the third executor starts, gets warmups and then actives once caught up;
2. the input stops and the backlog drains: after the scale-in window the operator decides "3 -> 2";
   the third executor is leaving, its actives go to caught-up copies, then the StatefulSet is scaled
   down (`ScaledIn`); no task fails over;
3. every word is counted exactly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from e2e.wordcount import APP, WordCount, delete_namespace, deploy_word_count, until
from eddy_operator import builders
from tests.operator.cluster import get, report
from tests.servers import KafkaBroker, NodeCluster

pytestmark = pytest.mark.e2e

NAMESPACE = "wordcount-autoscaling"
AUTOSCALING = {"enabled": True, "minReplicas": 2, "maxReplicas": 3, "targetUtilization": 10,
               "catchUpDuration": "20s", "metricsWindow": "10s", "scaleOutStabilization": "5s",
               "scaleInStabilization": "30s", "maxStep": 1}
#: each executor may use a quarter of a core; at 10 % of what one executor counts per busy second
#: (about 20k records in the first runs), two are too few for FEED_LINES_PER_S (about 16k records/s)
CPU = {"request": "250m", "limit": "250m"}
FEED_LINES_PER_S = 2500
FEED_S = 40


@pytest.fixture(scope="module")
def app(operator: NodeCluster, kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WordCount]:
    wc = deploy_word_count(operator, kafka, NAMESPACE, executors=2, standbys=1, executors__cpu=CPU,
                           autoscaling=AUTOSCALING)
    try:
        with wc.serving(lambda: tmp_path_factory.mktemp("wordcount-autoscaling")):
            yield wc
    finally:
        delete_namespace(operator, wc.namespace)


def _figures(app: WordCount) -> str:
    """What the autoscaler saw, for a failure message: its status and the driver's load figures."""
    status = (get(app.node, "streamapp", APP, app.namespace).get("status") or {}).get("autoscaling")
    state = app.channel.runtime_state()
    load = {e: (x.records, round(x.busy_s, 1)) for e, x in state.load.items()} if state is not None else None
    lag = sum(state.input_lag.values()) if state is not None else None
    return f"status.autoscaling {status}; runtime load {load}, input lag {lag}"


def _replicas(app: WordCount) -> int:
    return int(get(app.node, "streamapp", APP, app.namespace)["spec"]["executors"]["replicas"])


def _statefulset_replicas(app: WordCount) -> int:
    sts = get(app.node, "statefulset", builders.executor_statefulset_name(APP), app.namespace)
    return int(sts["spec"]["replicas"])


@pytest.mark.timeout(1500)
def test_the_autoscaler_scales_out_under_a_backlog_and_back_in_once_it_has_drained(app: WordCount) -> None:
    app.steady()
    stop = threading.Event()

    def feed() -> None:
        end = time.monotonic() + FEED_S
        while time.monotonic() < end and not stop.is_set():
            app.feed(FEED_LINES_PER_S)
            time.sleep(1)

    t0 = time.monotonic()
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    seen: list[str] = []

    def scaled_out() -> list[str]:
        status = (get(app.node, "streamapp", APP, app.namespace).get("status") or {}).get("autoscaling") or {}
        seen.append(f"+{time.monotonic() - t0:.0f}s {status.get('recommended')} {status.get('holding', '')} "
                    f"{status.get('processedRate')} {status.get('busyPercent')}")
        return [m for m in app.events("Autoscaled") if "executors 2 -> 3" in m]

    try:
        out = until(scaled_out, 300, "an Autoscaled Event 2 -> 3", interval=2, alive=app.check_driver)
        decided_out = time.monotonic() - t0
    except AssertionError as err:
        raise AssertionError(f"{err}; {_figures(app)}; seen (recommended, holding, rate, busy %): "
                             f"{seen[::3]}") from err
    finally:
        stop.set()
        feeder.join()
    assert _replicas(app) == 3
    app.executors = 3
    until(app.running_executors, 300, "a third executor running", alive=app.check_driver)
    status = get(app.node, "streamapp", APP, app.namespace)["status"]["autoscaling"]
    assert status["lastDecision"]["to"] == 3, status

    back_in = until(lambda: [m for m in app.events("Autoscaled") if "executors 3 -> 2" in m], 600,
                    "an Autoscaled Event 3 -> 2 once the backlog has drained", interval=2, alive=app.check_driver)
    decided_in = time.monotonic() - t0
    until(lambda: _statefulset_replicas(app) == 2 and app.events("ScaledIn"), 180,
          "the executor StatefulSet scaled in to 2", alive=app.check_driver)
    app.executors = 2
    until(app.running_executors, 180, "two executors left", alive=app.check_driver)
    # the leaving executor handed its actives over: none failed over
    failed_over = [m for m in app.events("ExecutorLost") if " 0 active task(s)" not in m]
    assert not failed_over, failed_over
    app.counted_everything(600, "every line fed counted after the scale-out and the scale-in")
    report(f"\nscale-out decided {decided_out:.0f} s after the feed began: {out[0][:300]}\n"
           f"scale-in decided {decided_in:.0f} s after it: {back_in[0][:300]}")
