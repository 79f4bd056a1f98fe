"""The driver's /healthz: the pure stall decision, then the endpoint served over HTTP beside
/metrics."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from eddy_runtime.health import (
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


def _get(port: int, path: str) -> tuple[int, str]:
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
        assert _get(server.port, "/healthz") == (200, "ok\n")
        progress.batch_finished()
        clock.now += 121
        status, body = _get(server.port, "/healthz")
        assert status == 503 and "no micro-batch started or finished for 121s" in body, body
        status, body = _get(server.port, "/metrics")
        assert status == 200 and 'eddy_driver_batches_total{app="wc"} 1.0' in body
        progress.batch_started()
        assert _get(server.port, "/healthz")[0] == 200
    finally:
        server.close()


@pytest.mark.integration
def test_a_running_driver_serves_healthz_and_metrics_on_its_metrics_port(kafka, spark, tmp_path):
    """The real batch loop (Kafka, local-cluster Spark) feeds the endpoint the probe reads."""
    from tests.runtime.apps import driver_for, produce, run_until_idle, streamapp
    from tests.servers import free_port

    app = kafka.unique_name("health")
    source = kafka.create_topic(f"{app}-lines", partitions=2)
    produce(kafka.bootstrap, source, ((None, b"a b c") for _ in range(50)))
    spec = streamapp(app, kafka.bootstrap, "examples.wordcount.app", {"input_topic": source,
                                                                      "output_topic": f"{app}-counts"})
    port = free_port()
    driver = driver_for(spark, spec, str(tmp_path / "state"), metrics_port=port, metrics_addr="127.0.0.1")
    seen: list[tuple[int, str, int]] = []

    def probe(_report: object) -> None:
        status, body = _get(port, "/healthz")
        metrics_status, metrics = _get(port, "/metrics")
        assert metrics_status == 200 and "eddy_driver_batches_total" in metrics
        seen.append((status, body, driver.progress.batches_finished))

    run_until_idle(driver, on_batch=probe)
    assert seen and all((status, body) == (200, "ok\n") for status, body, _ in seen), seen
    assert seen[-1][2] >= 1  # batches were counted as progress
    with pytest.raises(OSError):  # closed with the driver
        _get(port, "/healthz")
