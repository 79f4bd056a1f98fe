"""The driver's /healthz: the pure stall decision, then the endpoint served over HTTP beside
/metrics."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from eddy_runtime.protocol.health import (
    BatchProgress,
    HealthAndMetricsServer,
    stall_bound_s,
    stall_problem,
    startup_bound_s,
)


class Clock:
    """A clock the test moves by hand (the decision reads time through it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.unit
def test_the_bound_is_twenty_triggers_with_a_two_minute_floor():
    assert stall_bound_s(1.0) == 120.0
    assert stall_bound_s(30.0) == 600.0
    assert startup_bound_s(1.0) == 600.0
    assert startup_bound_s(60.0) == 3600.0


@pytest.mark.unit
def test_a_loop_silent_past_the_bound_is_wedged_and_one_inside_it_is_not():
    assert stall_problem(now=1119.0, last_progress_at=1000.0, first_batch_done=True, trigger_interval_s=1) is None
    problem = stall_problem(now=1121.0, last_progress_at=1000.0, first_batch_done=True, trigger_interval_s=1)
    assert problem == "no micro-batch started or finished for 121s (bound 120s)"


@pytest.mark.unit
def test_a_slow_first_batch_or_restore_gets_the_startup_bound():
    clock = Clock()
    progress = BatchProgress(1.0, clock=clock)
    progress.batch_started()
    clock.now += 500  # Spark's first jobs, executors restoring their stores
    assert progress.problem() is None
    clock.now += 101
    assert "the first micro-batch has not finished for 601s" in (progress.problem() or "")
    progress.batch_finished()
    assert progress.problem() is None
    # from then on each batch must start or finish within the ordinary bound
    clock.now += 119
    progress.batch_started()
    clock.now += 119  # a slow batch, still inside the bound
    assert progress.problem() is None
    clock.now += 2
    assert "no micro-batch started or finished" in (progress.problem() or "")


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.mark.integration
def test_healthz_answers_503_once_the_loop_stalls_and_metrics_stay_served():
    from prometheus_client import CollectorRegistry, Counter

    registry = CollectorRegistry()
    Counter("eddy_driver_batches", "batches", ["app"], registry=registry).labels("wc").inc()
    clock = Clock()
    progress = BatchProgress(1.0, clock=clock)
    server = HealthAndMetricsServer(0, "127.0.0.1", registry, progress)
    try:
        assert http_get(server.port, "/healthz") == (200, "ok\n")
        progress.batch_finished()
        clock.now += 121
        status, body = http_get(server.port, "/healthz")
        assert status == 503 and "no micro-batch started or finished for 121s" in body, body
        status, body = http_get(server.port, "/metrics")
        assert status == 200 and 'eddy_driver_batches_total{app="wc"} 1.0' in body
        progress.batch_started()
        assert http_get(server.port, "/healthz")[0] == 200
    finally:
        server.close()
