"""Two operator processes (`python -m eddy_operator`, real subprocesses) against the real control
plane with kwok nodes: one leads through the Lease, the other stands by; a leader killed in the
middle of an executor failover is replaced within about a lease duration, the failover completes
once, and nothing is created twice."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from eddy_contract import channel
from eddy_operator import builders
from eddy_operator.leader import LeaseLock
from tests.operator.cluster import (
    OperatorProcess,
    get,
    install_crd,
    lease_holder,
    report,
    wait_for,
)
from tests.operator.test_leader import take_over
from tests.operator.test_operator_integration import APP, start_app_with_executors

pytestmark = pytest.mark.integration

LEASE_S, RENEW_S, RETRY_S = 6, 1, 1
ELECTION = (f"--lease-duration={LEASE_S}", f"--lease-renew={RENEW_S}", f"--lease-retry={RETRY_S}")


@pytest.fixture(scope="module")
def crd(kube):
    install_crd(kube)
    return kube


@pytest.fixture
def operators(crd, namespace, tmp_path):
    """Two candidates for the Lease in the test's namespace, serving that namespace; stopped after."""
    procs = [
        OperatorProcess(crd, name, namespace, tmp_path, ("--namespace", namespace, *ELECTION))
        for name in ("op-a", "op-b")
    ]
    yield procs
    for p in procs:
        p.stop()


def leader_and_standby(kube, namespace, procs, timeout=60.0):
    holder = wait_for(lambda: lease_holder(kube, namespace), timeout, 0.2, "a leader in the Lease")
    leaders = [p for p in procs if p.is_holder(holder)]
    assert len(leaders) == 1, (holder, [p.pod_name for p in procs])
    return leaders[0], next(p for p in procs if p is not leaders[0])


def kopf_is_serving(op: OperatorProcess) -> bool:
    """kopf's liveness endpoint (not the standby's, on the same port) answers with the probe's result."""
    status, body = op.get(op.health_port, "/healthz")
    return status == 200 and "handlers" in body


class GenerationRecorder:
    """Every version of the assignment ConfigMap, read from a watch (no version is missed)."""

    def __init__(self, kube, namespace: str) -> None:
        from kubernetes import client, watch

        self.core = client.CoreV1Api(kube.api_client())
        self.namespace = namespace
        self.seen: list[channel.AssignmentMessage] = []
        self._watch = watch.Watch()
        self._stopped = False
        self.error: Exception | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        name = channel.assignment_configmap_name(APP)
        try:
            for event in self._watch.stream(
                self.core.list_namespaced_config_map,
                self.namespace,
                field_selector=f"metadata.name={name}",
                timeout_seconds=600,
            ):
                data = event["object"].data
                if event["type"] in ("ADDED", "MODIFIED") and data:
                    message = channel.decode_assignment(data)
                    if not self.seen or self.seen[-1] != message:
                        self.seen.append(message)
        except Exception as err:  # the stream is cut when stopped; otherwise the test must know
            if not self._stopped:
                self.error = err

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()
        assert self.error is None, f"the assignment watch broke: {self.error!r}"

    def by_generation(self) -> dict[int, list[channel.AssignmentMessage]]:
        out: dict[int, list[channel.AssignmentMessage]] = {}
        for m in self.seen:
            out.setdefault(m.assignment.generation, []).append(m)
        return out


def count_owned(kube, namespace) -> dict[str, list[str]]:
    selector = f"{builders.APP_LABEL}={APP}"
    out = {}
    for kind in ("statefulset", "service", "serviceaccount", "role", "rolebinding", "poddisruptionbudget", "configmap"):
        items = json.loads(kube.kubectl("get", kind, "-n", namespace, "-l", selector, "-o", "json").stdout)["items"]
        out[kind] = sorted(i["metadata"]["name"] for i in items)
    drivers = json.loads(
        kube.kubectl("get", "pods", "-n", namespace, "-l", f"{builders.ROLE_LABEL}=driver", "-o", "json").stdout
    )["items"]
    out["driver pods"] = sorted(p["metadata"]["name"] for p in drivers)
    return out


EXPECTED_OWNED = {
    "statefulset": ["wordcount-driver"],
    "service": ["wordcount-driver", "wordcount-executors"],
    "serviceaccount": ["wordcount-driver", "wordcount-executor"],
    "role": ["wordcount-driver"],
    "rolebinding": ["wordcount-driver"],
    "poddisruptionbudget": ["wordcount-executors"],
    "configmap": sorted(["wordcount-spark-conf", "wordcount-runtime-state", channel.assignment_configmap_name(APP),
                         "wordcount-versions"]),
    "driver pods": ["wordcount-driver-0"],
}


def test_the_standby_serves_liveness_and_metrics_and_only_the_leader_handles(crd, namespace, operators):
    leader, standby = leader_and_standby(crd, namespace, operators)
    status, body = wait_for(
        lambda: (r := standby.get(standby.health_port, "/healthz"))[0] == 200 and r, 30, 0.2, "standby /healthz"
    )
    assert json.loads(body)["role"] == "standby"
    standby_says = body
    wait_for(lambda: kopf_is_serving(leader), 60, 0.2, "leader /healthz (kopf's)")
    status, body = leader.get(leader.health_port, "/healthz")
    assert json.loads(body) == {"handlers": "ok"}, body  # the probe handler ran and passed
    assert wait_for(lambda: leader.metric("eddy_operator_leader") == 1.0, 10, 0.2, "leader gauge 1")
    assert standby.metric("eddy_operator_leader") == 0.0
    report(f"\nleader {leader.pod_name}: /healthz {body!r}; standby {standby.pod_name}: /healthz {standby_says!r}")


@pytest.mark.parametrize("how", ["frozen", "racing"])
def test_leader_killed_during_a_failover_is_replaced_and_the_failover_completes_once(crd, namespace, operators, how):
    """`frozen`: the leader is stopped (SIGSTOP) before the executor goes, then SIGKILLed, so the
    standby alone handles the loss. `racing`: SIGKILL right after the executor pod's delete, while
    the leader is reacting to it."""
    kube = crd
    leader, standby = leader_and_standby(kube, namespace, operators)
    driver, first = start_app_with_executors(kube, namespace)
    recorder = GenerationRecorder(kube, namespace)
    try:
        gen = first.assignment.generation
        victim = "1"
        victim_pod = next(e.pod for e in first.executors if e.id == victim)
        moved = first.assignment.active_tasks(victim)
        assert moved

        if how == "frozen":
            os.kill(leader.proc.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        driver.core.delete_namespaced_pod(victim_pod, namespace)
        os.kill(leader.proc.pid, signal.SIGKILL)
        leader.proc.wait(10)
        killed = time.monotonic()

        wait_for(lambda: standby.is_holder(lease_holder(kube, namespace)), LEASE_S + 10, 0.1, "the standby leading")
        took_over = time.monotonic() - killed
        after = wait_for(
            lambda: (m := driver.assignment())
            and m.assignment.generation > gen
            and victim not in m.assignment.executors()
            and m,
            LEASE_S + 30,
            0.05,
            "a new assignment generation without the lost executor",
        )
        published = time.monotonic() - t0
        for task in moved:
            assert after.assignment.tasks[task].active in first.assignment.tasks[task].standbys, task
        status = wait_for(
            lambda: (s := get(kube, "streamapp", APP, namespace)["status"]).get("lastFailover")
            and s.get("assignmentGeneration", 0) >= after.assignment.generation
            and s,
            30,
            0.2,
            "status.lastFailover and the new generation in the status",
        )
        assert status["lastFailover"]["executor"] == victim
        assert status["lastFailover"]["tasksMoved"] == len(moved)
        time.sleep(RENEW_S * 3)  # let anything a second writer would do show up
    finally:
        recorder.stop()

    generations = recorder.by_generation()
    assert all(len(ms) == 1 for ms in generations.values()), {g: len(ms) for g, ms in generations.items()}
    assert sorted(generations) == sorted(set(generations))
    assert count_owned(kube, namespace) == EXPECTED_OWNED
    report(
        f"\n{how}: leader {leader.pod_name} SIGKILLed; {standby.pod_name} held the Lease {took_over:.1f}s later "
        f"(lease {LEASE_S}s); generation {gen} -> {after.assignment.generation} published {published:.1f}s after "
        f"the executor pod's delete; generations seen {sorted(generations)}; lastFailover {status['lastFailover']}"
    )
    assert took_over <= LEASE_S + 2 * RETRY_S + 1
    assert standby.proc.poll() is None, standby.log_tail()


def test_a_failover_the_dead_leader_published_but_never_reported_reaches_the_status(crd, namespace, operators):
    """The window the racing kill above can hit: the leader wrote the new assignment and died
    before patching the status. Made certain here by erasing status.lastFailover after the kill;
    the next leader cannot see the pod event again, so it must read the failover from the
    assignment's ConfigMap."""
    kube = crd
    leader, standby = leader_and_standby(kube, namespace, operators)
    driver, first = start_app_with_executors(kube, namespace)
    victim = "1"
    driver.core.delete_namespaced_pod(next(e.pod for e in first.executors if e.id == victim), namespace)
    reported = wait_for(
        lambda: get(kube, "streamapp", APP, namespace)["status"].get("lastFailover"), 30, 0.1, "lastFailover"
    )
    os.kill(leader.proc.pid, signal.SIGKILL)
    leader.proc.wait(10)
    kube.kubectl(
        "patch", "streamapp", APP, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"lastFailover": None}}),
    )  # fmt: skip
    assert "lastFailover" not in get(kube, "streamapp", APP, namespace)["status"]

    wait_for(lambda: standby.is_holder(lease_holder(kube, namespace)), LEASE_S + 10, 0.1, "the standby leading")
    again = wait_for(
        lambda: get(kube, "streamapp", APP, namespace)["status"].get("lastFailover"),
        30,
        0.2,
        "lastFailover written by the new leader",
    )
    assert again == reported
    assert reported["executor"] == victim
    assert reported["tasksMoved"] == len(first.assignment.active_tasks(victim))


def test_a_stopped_leader_releases_the_lease_and_the_standby_takes_over_at_once(crd, namespace, operators):
    leader, standby = leader_and_standby(crd, namespace, operators)
    wait_for(lambda: kopf_is_serving(leader), 60, 0.2, "the leader running kopf")
    t0 = time.monotonic()
    assert leader.stop() == 0, leader.log_tail()
    stopped = time.monotonic() - t0
    wait_for(lambda: standby.is_holder(lease_holder(crd, namespace)), 5, 0.05, "the standby leading")
    handover = time.monotonic() - t0 - stopped
    assert "released Lease" in leader.log_tail()
    report(f"\nSIGTERM: leader stopped in {stopped:.1f}s; the standby held the Lease {handover:.2f}s after that")
    assert handover < 2 * RETRY_S + 0.5


def test_a_leader_whose_lease_is_taken_exits_non_zero_at_once(crd, namespace, operators):
    leader, _standby = leader_and_standby(crd, namespace, operators)
    wait_for(lambda: kopf_is_serving(leader), 60, 0.2, "the leader running kopf")
    take_over(LeaseLock(crd.api_client(), namespace, "eddy-operator", request_timeout_s=5), "intruder", LEASE_S)
    code = leader.proc.wait(RENEW_S + RETRY_S + 5)
    assert code == 3, leader.log_tail()
    assert "lost leadership" in leader.log_tail()


class FreezableProxy:
    """A TCP relay on loopback in front of the apiserver; `freeze()` stops relaying (connections
    stay open, bytes stop moving), as a network partition between one replica and the apiserver."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        import socket

        self.upstream = (upstream_host, upstream_port)
        self.frozen = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst) -> None:
        try:
            while data := src.recv(65536):
                while self.frozen.is_set():
                    time.sleep(0.05)
                dst.sendall(data)
        except OSError:
            pass

    def freeze(self) -> None:
        self.frozen.set()

    def close(self) -> None:
        self.listener.close()
        for s in self.sockets:
            s.close()


def test_a_leader_cut_off_from_the_apiserver_exits_before_the_standby_may_lead(crd, namespace, tmp_path):
    """The leader reaches the apiserver through a relay that then stops relaying: it must stop
    (exit 3) renew-deadline after its last renewal, before the standby, which measures a whole
    lease duration from when it last saw a renewal, takes the Lease."""
    import urllib.parse

    import yaml

    config = yaml.safe_load(crd.kubeconfig.read_text())
    server = urllib.parse.urlsplit(config["clusters"][0]["cluster"]["server"])
    proxy = FreezableProxy(server.hostname, server.port)
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    relayed = tmp_path / "relayed-kubeconfig"
    relayed.write_text(yaml.safe_dump(config))

    class Relayed:  # the same control plane, reached through the relay
        kubeconfig = relayed

    leader = OperatorProcess(Relayed, "op-cut", namespace, tmp_path, ("--namespace", namespace, *ELECTION))  # type: ignore[arg-type]
    standby = None
    try:
        wait_for(lambda: leader.is_holder(lease_holder(crd, namespace)), 60, 0.2, "op-cut leading")
        standby = OperatorProcess(crd, "op-direct", namespace, tmp_path, ("--namespace", namespace, *ELECTION))
        wait_for(lambda: standby.get(standby.health_port, "/healthz")[0] == 200, 60, 0.2, "the standby campaigning")
        wait_for(lambda: kopf_is_serving(leader), 60, 0.2, "the leader running kopf")
        proxy.freeze()
        frozen_at = time.monotonic()
        code = leader.proc.wait(LEASE_S + 5)
        exited = time.monotonic() - frozen_at
        wait_for(lambda: standby.is_holder(lease_holder(crd, namespace)), LEASE_S + 10, 0.1, "op-direct leading")
        took_over = time.monotonic() - frozen_at
        assert code == 3, leader.log_tail()
        assert "lost leadership" in leader.log_tail()
        report(
            f"\nleader cut off from the apiserver: it exited (status {code}) {exited:.1f}s later; "
            f"the standby held the Lease {took_over:.1f}s later (lease {LEASE_S}s, renew deadline "
            f"{LEASE_S - 2 * RETRY_S}s)"
        )
        assert exited < took_over, "the old leader was still running when the standby took over"
        assert exited <= LEASE_S - 2 * RETRY_S + 1
    finally:
        if standby is not None:
            standby.stop()
        leader.stop(5)
        proxy.close()
