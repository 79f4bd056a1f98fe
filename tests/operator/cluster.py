"""Helpers for the operator's integration tests: run the operator, apply apps, and act as
Spark would (executor StatefulSet, executor-id labels, the driver's runtime state)."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import yaml
from kopf.testing import KopfRunner

from eddy_contract import channel
from eddy_operator import builders
from tests.operator.manifests import CRD_PATH, REPO
from tests.servers import ControlPlane, free_port

EXAMPLE = REPO / "examples" / "wordcount" / "streamapp.yaml"


def report(text: str) -> None:
    """Print past the operator thread: kopf's KopfRunner (click's test runner) swaps sys.stdout
    while the operator runs, which would swallow a test's figures."""
    print(text, file=sys.__stdout__, flush=True)


def wait_for(check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05, what: str = "") -> Any:
    """Call `check` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as err:  # the object may not exist yet
            last = err
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}: last {last!r}")


def install_crd(kube: ControlPlane) -> None:
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_PATH))
    kube.kubectl("wait", "--for=condition=Established", "crd/streamapps.eddy.dev", "--timeout=60s")
    # Spark's on-demand claims need a class; a default one stands in for the cluster's.
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {
                    "name": "standard",
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                },
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            }
        ),
    )


@contextlib.contextmanager
def running_operator(kube: ControlPlane) -> Iterator[KopfRunner]:
    """The operator in a thread of this process, as kopf's own test runner runs it."""
    env = {
        "KUBECONFIG": str(kube.kubeconfig),
        "EDDY_OPERATOR_METRICS_ADDRESS": "127.0.0.1",
        "EDDY_OPERATOR_METRICS_PORT": str(free_port()),
        "EDDY_OPERATOR_RESYNC_SECONDS": "5",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with KopfRunner(
            ["run", "--standalone", "--all-namespaces", "-m", "eddy_operator.handlers"], timeout=60
        ) as runner:
            runner.metrics_port = int(env["EDDY_OPERATOR_METRICS_PORT"])  # type: ignore[attr-defined]
            yield runner
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def example(namespace: str, **spec_changes: Any) -> dict[str, Any]:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["namespace"] = namespace
    for path, value in spec_changes.items():
        node = body["spec"]
        keys = path.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return body


def apply(kube: ControlPlane, body: Mapping[str, Any], check: bool = True):
    return kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(dict(body)), check=check)


def get(kube: ControlPlane, kind: str, name: str, namespace: str) -> dict[str, Any]:
    return json.loads(kube.kubectl("get", kind, name, "-n", namespace, "-o", "json").stdout)


def get_or_none(kube: ControlPlane, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
    proc = kube.kubectl("get", kind, name, "-n", namespace, "-o", "json", "--ignore-not-found", check=False)
    return json.loads(proc.stdout) if proc.stdout.strip() else None


def condition(app: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (app.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return c
    return None


# --- acting as Spark's driver -----------------------------------------------------------------


def create_executor_statefulset(kube: ControlPlane, namespace: str, app: str, replicas: int) -> None:
    """What Spark's statefulset allocator creates (`spark-s-<appId>-0`), minus the claims (this
    control plane has no volume provisioner) and with an image that never runs (kwok fakes it)."""
    driver_pod = get(kube, "pod", builders.driver_pod_name(app), namespace)
    labels = {
        builders.SPARK_APP_LABEL: app,
        builders.SPARK_ROLE_LABEL: "executor",
        "spark-resource-profile-id": "0",
    }
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": builders.executor_statefulset_name(app),
            "namespace": namespace,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": driver_pod["metadata"]["name"],
                    "uid": driver_pod["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "podManagementPolicy": "Parallel",
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {
                    "labels": {
                        **labels,
                        builders.SPARK_EXEC_ID_LABEL: "EXECID",
                        builders.APP_LABEL: app,
                        builders.ROLE_LABEL: "executor",
                    }
                },
                "spec": {
                    "restartPolicy": "Always",
                    "containers": [{"name": "executor", "image": "eddy:test", "args": ["executor"]}],
                },
            },
        },
    }
    apply(kube, sts)


class FakeSparkDriver:
    """Labels executor pods with ids as Spark's driver does, and publishes the runtime state."""

    def __init__(self, kube: ControlPlane, namespace: str, app: str) -> None:
        from kubernetes import client

        self.kube = kube
        self.namespace = namespace
        self.app = app
        self.core = client.CoreV1Api(kube.api_client())
        self.next_id = 1
        self.ids: dict[str, str] = {}  # pod uid -> executor id

    def executor_pods(self) -> list[Any]:
        selector = builders.label_selector_string(builders.executor_selector(self.app))
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def register_running_executors(self, expected: int, timeout: float = 60) -> dict[str, str]:
        """Give every running executor pod an id (new pods get new ids, as in Spark)."""
        from kubernetes.client.exceptions import ApiException

        def running() -> list[Any]:
            pods = [
                p
                for p in self.executor_pods()
                if p.status.phase == "Running"
                and p.metadata.deletion_timestamp is None
                and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            ]
            return pods if len(pods) >= expected else []

        def labelled() -> list[Any]:
            pods = running()
            for pod in sorted(pods, key=lambda p: p.metadata.name):
                if pod.metadata.uid in self.ids:
                    continue
                # Labelled by name and uid: a pod listed a moment before it was deleted (a loss
                # the test caused, its replacement not made yet) is looked for again.
                patch = {"metadata": {"uid": pod.metadata.uid,
                                      "labels": {builders.SPARK_EXEC_ID_LABEL: str(self.next_id)}}}
                try:
                    self.core.patch_namespaced_pod(pod.metadata.name, self.namespace, patch)
                except ApiException as err:
                    if err.status in (404, 409):
                        return []
                    raise
                self.ids[pod.metadata.uid] = str(self.next_id)
                self.next_id += 1
            return pods

        pods = wait_for(labelled, timeout, what=f"{expected} running executor pods")
        return {p.metadata.name: self.ids[p.metadata.uid] for p in pods}

    def publish(
        self, end_offsets: Mapping[str, int], held: Mapping[str, Mapping[str, int]], generation: int | None = None,
        load: Mapping[str, tuple[int, float]] | None = None, input_lag: Mapping[str, int] | None = None,
        updated_at: str = "2025-01-01T00:00:00.000Z",
    ) -> None:
        """A runtime state as a driver would write it; `load`: executor -> (records, busy seconds)
        since this fake driver started."""
        state = channel.RuntimeState(
            app=self.app,
            updated_at=updated_at,
            assignment_generation=generation,
            changelog_end_offsets={t: {"counts": o} for t, o in end_offsets.items()},
            executors={
                e: channel.ExecutorInventory(e, stores={t: {"counts": o} for t, o in h.items()})
                for e, h in held.items()
            },
            load={e: channel.ExecutorLoad(r, b) for e, (r, b) in (load or {}).items()},
            load_since="2025-01-01T00:00:00.000Z" if load else None,
            input_lag=dict(input_lag or {}),
        )
        self.core.patch_namespaced_config_map(
            channel.runtime_state_configmap_name(self.app),
            self.namespace,
            {"data": channel.encode_runtime_state(state)},
        )

    def assignment(self) -> channel.AssignmentMessage | None:
        from kubernetes.client.exceptions import ApiException

        try:
            cm = self.core.read_namespaced_config_map(channel.assignment_configmap_name(self.app), self.namespace)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return channel.decode_assignment(cm.data) if cm.data else None


def caught_up_inventory(
    message: channel.AssignmentMessage, end_offsets: Mapping[str, int]
) -> dict[str, dict[str, int]]:
    """Every copy in the assignment holds the task's whole changelog (standbys are hot); every
    executor it names is in the inventory (as a driver that has probed each one's volume)."""
    held: dict[str, dict[str, int]] = {e.id: {} for e in message.executors}
    for task, placement in message.assignment.tasks.items():
        for e in placement.copies:
            held.setdefault(e, {})[task] = end_offsets[task]
    return copy.deepcopy(held)


# --- the operator as separate processes (leader election) --------------------------------------


class OperatorProcess:
    """`python -m eddy_operator` as its own process (so SIGKILL is real), logging to a file,
    campaigning for the Lease `eddy-operator` in `lease_namespace` as pod `pod_name`."""

    def __init__(
        self, kube: ControlPlane, pod_name: str, lease_namespace: str, log_dir: Any, args: tuple[str, ...] = ()
    ) -> None:
        import subprocess

        self.pod_name = pod_name
        self.metrics_port, self.health_port = free_port(), free_port()
        self.log_path = log_dir / f"{pod_name}.log"
        env = {
            **os.environ,
            "KUBECONFIG": str(kube.kubeconfig),
            "POD_NAME": pod_name,
            "POD_NAMESPACE": lease_namespace,
            "EDDY_OPERATOR_METRICS_PORT": str(self.metrics_port),
            "EDDY_OPERATOR_METRICS_ADDRESS": "127.0.0.1",
            "EDDY_OPERATOR_RESYNC_SECONDS": "5",
        }
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "eddy_operator",
                    f"--liveness=http://127.0.0.1:{self.health_port}/healthz",
                    *args,
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def is_holder(self, holder: str | None) -> bool:
        """Identities are the pod name and a random suffix."""
        return bool(holder) and holder.rsplit("-", 1)[0] == self.pod_name  # type: ignore[union-attr]

    def get(self, port: int, path: str) -> tuple[int, str]:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def metric(self, name: str) -> float | None:
        from prometheus_client.parser import text_string_to_metric_families

        _status, text = self.get(self.metrics_port, "/metrics")
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and not sample.labels:
                    return float(sample.value)
        return None

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text()[-chars:]

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then SIGKILL after `timeout`; the exit status."""
        import subprocess

        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return int(self.proc.returncode)


def lease_holder(kube: ControlPlane, namespace: str, name: str = "eddy-operator") -> str | None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        lease = client.CoordinationV1Api(kube.api_client()).read_namespaced_lease(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return lease.spec.holder_identity or None
