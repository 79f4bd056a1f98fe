"""An executor pod's cores, read from its container resources, weight it in the assignor."""

from __future__ import annotations

from typing import Any

import pytest

from eddy_contract.assignor import Executor
from eddy_operator.pods import live_executors, pod_cores, pod_info

pytestmark = pytest.mark.unit


def executor_pod(exec_id: str, resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": f"e{exec_id}", "labels": {"spark-role": "executor", "spark-exec-id": exec_id}},
        "spec": {"nodeName": "node-a", "containers": [{"name": "spark-kubernetes-executor", "resources": resources}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.mark.parametrize(("resources", "cores"), [
    ({"requests": {"cpu": "2"}, "limits": {"cpu": "4"}}, 2),
    ({"limits": {"cpu": "3"}}, 3),
    ({"requests": {"cpu": "2500m"}}, 2),
    ({"requests": {"cpu": "500m"}}, 1),
    ({}, 1),
    ({"requests": {"cpu": "lots"}}, 1),
])
def test_cores_come_from_the_cpu_request_rounded_down_and_at_least_one(resources: dict[str, Any], cores: int) -> None:
    assert pod_cores(executor_pod("1", resources)) == cores


def test_live_executors_carry_their_cores_to_the_assignor() -> None:
    pods = [pod_info(executor_pod(i, {"requests": {"cpu": cpu}})) for i, cpu in (("1", "1"), ("2", "4"))]
    assert live_executors(pods, {}, "topology.kubernetes.io/zone") == [
        Executor("1", "e1", None, 1),
        Executor("2", "e2", None, 4),
    ]
