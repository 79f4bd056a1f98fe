"""The Kubernetes control plane the tests use is real: CRDs are served and validated by the
apiserver, and the controller-manager's controllers run."""

from __future__ import annotations

import json
import time

import pytest
import yaml

pytestmark = pytest.mark.integration

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.smoke.eddy.dev"},
    "spec": {
        "group": "smoke.eddy.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {"size": {"type": "integer", "minimum": 1}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.2)


def _widget(name: str, size: object) -> str:
    return yaml.safe_dump(
        {"apiVersion": "smoke.eddy.dev/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": size}}
    )


def test_crd_is_established_and_its_objects_round_trip_and_are_validated(kube, namespace) -> None:
    kube.kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    kube.kubectl("wait", "--for=condition=Established", "crd/widgets.smoke.eddy.dev", "--timeout=60s")

    # Discovery may lag the Established condition by a moment.
    _wait(lambda: kube.kubectl("apply", "-n", namespace, "-f", "-", input=_widget("w1", 3), check=False)
          .returncode == 0, 30, "the Widget kind to be served")
    got = json.loads(kube.kubectl("get", "-n", namespace, "widget", "w1", "-o", "json").stdout)
    assert got["spec"] == {"size": 3}

    rejected = kube.kubectl("apply", "-n", namespace, "-f", "-", input=_widget("w2", 0), check=False)
    assert rejected.returncode != 0
    assert "spec.size" in rejected.stderr
    wrong_type = kube.kubectl("apply", "-n", namespace, "-f", "-", input=_widget("w3", "big"), check=False)
    assert wrong_type.returncode != 0
    assert "spec.size" in wrong_type.stderr


def test_controller_manager_creates_a_replicaset_for_a_deployment(kube, namespace) -> None:
    kube.kubectl("create", "deployment", "smoke", "--image=example.invalid/none:1", "-n", namespace)

    def replicasets():
        items = json.loads(kube.kubectl("get", "rs", "-n", namespace, "-o", "json").stdout)["items"]
        return [rs for rs in items if rs["metadata"]["ownerReferences"][0]["name"] == "smoke"]

    owned = _wait(replicasets, 60, "a ReplicaSet owned by the Deployment")
    assert owned[0]["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
