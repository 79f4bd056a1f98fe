"""Which executors count as unreachable from the operator's probes (eddy_operator.reachability),
and the probe itself against a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from eddy_operator.pods import PodInfo, pod_info
from eddy_operator.reachability import Reachability, answer_timeout_s, key_of, metrics_port, probe, probe_targets

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "wordcount" / "streamapp.yaml"


def executor(name: str, *, restarts: int = 0, ip: str | None = "10.244.1.7", exec_id: str | None = "1",
             running_since: str | None = "2026-11-27T10:00:00Z") -> PodInfo:
    return PodInfo(name, "executor", exec_id, "node-a", "Running", True, False, None, None, ip=ip, running=True,
                   restarts=restarts, uid=f"uid-{name}", running_since=running_since)


NOW = datetime(2026, 11, 27, 10, 0, 30, tzinfo=UTC)  # 30 s after the containers above started
LATER = datetime(2026, 11, 27, 10, 5, 0, tzinfo=UTC)


def probed(r: Reachability, pods: dict[PodInfo, bool], t: float) -> None:
    for pod, answered in pods.items():
        r.record(key_of(pod), answered, t)


def test_a_pod_that_answered_counts_as_unreachable_only_after_the_whole_window_without_an_answer() -> None:
    r = Reachability(after_s=3)
    pod, other = executor("wc-exec-1"), executor("wc-exec-2")
    probed(r, {pod: True, other: True}, 0.0)
    probed(r, {pod: False, other: True}, 1.0)
    probed(r, {pod: False, other: True}, 2.0)
    assert r.unreachable([pod, other], 2.9, NOW) == {}
    probed(r, {pod: False, other: True}, 3.0)
    assert r.unreachable([pod, other], 3.0, NOW) == {"wc-exec-1": 3.0}
    # one answer, and it is reachable again
    probed(r, {pod: True, other: True}, 4.0)
    assert r.unreachable([pod, other], 7.5, NOW) == {}  # not probed since its answer: nothing says it is gone


def test_a_starting_pod_never_heard_from_is_not_judged_but_one_that_ran_three_minutes_is() -> None:
    r = Reachability(after_s=3)
    starting, old, other = executor("wc-exec-1"), executor("wc-exec-3"), executor("wc-exec-2")
    for t in range(10):
        probed(r, {starting: False, old: False, other: True}, float(t))
    assert r.unreachable([starting, other], 9.0, NOW) == {}
    # a runner starts with its first Spark task: 74 s after its container on a loaded machine
    assert r.unreachable([starting, other], 9.0, NOW + timedelta(seconds=44)) == {}
    # a leader that took over from one on the node that died has never heard from its executors
    assert r.unreachable([old, other], 9.0, LATER) == {"wc-exec-3": 9.0}


def test_where_every_executor_is_silent_or_none_ever_answered_none_is_judged() -> None:
    r = Reachability(after_s=3)
    a, b = executor("wc-exec-1"), executor("wc-exec-2")
    for t in range(10):
        probed(r, {a: False, b: False}, float(t))
    assert r.unreachable([a, b], 9.0, LATER) == {}  # the operator is cut off (a NetworkPolicy?)
    probed(r, {a: True, b: True}, 10.0)
    for t in range(11, 20):
        probed(r, {a: False, b: False}, float(t))
    assert r.unreachable([a, b], 19.0, LATER) == {}  # both at once: more likely the operator's own network


def test_a_restarted_container_is_judged_afresh() -> None:
    r = Reachability(after_s=3)
    before, after = executor("wc-exec-1"), executor("wc-exec-1", restarts=1, running_since="2026-11-27T10:00:28Z")
    other = executor("wc-exec-2")
    probed(r, {before: True, other: True}, 0.0)
    probed(r, {before: False, after: False, other: True}, 5.0)
    assert r.unreachable([after, other], 5.0, NOW) == {}
    assert r.unreachable([before, other], 5.0, NOW) == {"wc-exec-1": 5.0}
    r.keep_only([key_of(after), key_of(other)])
    assert r.unreachable([before, other], 6.0, NOW) == {}


def test_only_registered_running_executors_and_a_running_driver_with_an_address_are_probed() -> None:
    pods = [executor("wc-exec-1"), executor("wc-exec-2", ip=None), executor("wc-exec-3", exec_id="EXECID"),
            PodInfo("wc-driver-0", "driver", None, "node-a", "Running", True, False, None, None, ip="10.244.1.2")]
    assert probe_targets(pods, 9108) == {key_of(pods[0]): "http://10.244.1.7:9108/healthz"}
    # a driver whose container runs is probed too: silent, it is away (eddy_operator.driverless)
    driver = PodInfo("wc-driver-0", "driver", None, "node-a", "Running", False, False, None, None, ip="10.244.1.2",
                     running=True, uid="uid-driver")
    assert probe_targets([*pods[:1], driver], 9108) == {key_of(pods[0]): "http://10.244.1.7:9108/healthz",
                                                        key_of(driver): "http://10.244.1.2:9108/healthz"}


def test_the_metrics_port_is_the_spec_s_or_the_crd_default() -> None:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["spec"].pop("metricsPort", None)
    assert metrics_port({**manifest, "spec": {**manifest["spec"], "metricsPort": 9200}}) == 9200
    assert metrics_port(manifest) == 9108


@pytest.fixture
def server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/slow/healthz":  # a runner starved of CPU for 1.3 s
                time.sleep(1.3)
            self.send_response(200 if self.path.endswith("/healthz") else 500)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_the_probe_tells_an_answering_runner_from_a_failing_and_a_closed_port(server: str) -> None:
    up, failing, closed = ("a", "", 0), ("b", "", 0), ("c", "", 0)
    answers = asyncio.run(probe({up: f"{server}/healthz", failing: f"{server}/other",
                                 closed: "http://127.0.0.1:1/healthz"}, timeout_s=2.0))
    assert answers == {up: True, failing: False, closed: False}


def test_a_runner_slow_to_answer_answers_within_what_the_window_leaves_beside_the_round_s_pause(server: str) -> None:
    assert answer_timeout_s(3.0) == 2.0
    assert answer_timeout_s(1.0) == 1.0  # never less than the pause between rounds
    slow = ("slow", "", 0)
    assert asyncio.run(probe({slow: f"{server}/slow/healthz"}, timeout_s=answer_timeout_s(3.0))) == {slow: True}
    assert asyncio.run(probe({slow: f"{server}/slow/healthz"}, timeout_s=1.0)) == {slow: False}


def test_a_pod_runs_since_its_last_container_started_and_not_at_all_while_one_waits() -> None:
    def pod(*states: dict[str, object]) -> PodInfo:
        return pod_info({"metadata": {"name": "wc-exec-1"}, "status": {"phase": "Running", "containerStatuses": [
            {"name": f"c{i}", "state": state} for i, state in enumerate(states)]}})

    assert pod({"running": {"startedAt": "2026-11-27T10:00:00Z"}},
               {"running": {"startedAt": "2026-11-27T10:00:07Z"}}).running_since == "2026-11-27T10:00:07Z"
    assert pod({"running": {"startedAt": "2026-11-27T10:00:00Z"}},
               {"waiting": {"reason": "CrashLoopBackOff"}}).running_since is None
