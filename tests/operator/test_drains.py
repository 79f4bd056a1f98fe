"""Which nodes are being drained, which executors leave, and which pods may go (eddy_operator.drains)."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from eddy_contract.assignor import Assignment, Executor, TaskAssignment
from eddy_contract.spec import StreamAppSpec
from eddy_operator.builders import Owner, build_executor_pdb
from eddy_operator.drains import HAND_OVER_ENV, drained, hands_over, is_draining, leaving
from eddy_operator.pods import PodInfo
from tests.operator.cluster import example

pytestmark = pytest.mark.unit


def _pod(name: str, node: str | None, exec_id: str | None, phase: str = "Running", deleting: bool = False,
         role: str = "executor") -> PodInfo:
    return PodInfo(name=name, role=role, exec_id=exec_id, node=node, phase=phase, ready=phase == "Running",
                   deleting=deleting, reason=None, zone_label=None, running=phase == "Running")


def test_a_cordoned_node_or_one_tainted_for_removal_is_draining() -> None:
    assert is_draining({"spec": {"unschedulable": True}})
    assert is_draining({"spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]}})
    assert is_draining({"spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}})
    assert not is_draining({"spec": {"taints": [{"key": "dedicated", "value": "kafka", "effect": "NoSchedule"}]}})
    assert not is_draining({"spec": {}})
    assert not is_draining({})


def test_the_executors_on_a_draining_node_are_leaving() -> None:
    pods = [_pod("app-exec-1", "n1", "1"), _pod("app-exec-2", "n2", "2"),
            _pod("app-driver-0", "n2", None, role="driver")]
    executors = [Executor("1", "app-exec-1"), Executor("2", "app-exec-2")]
    assert leaving(executors, pods, {"n2"}) == ["2"]
    assert leaving(executors, pods, set()) == []


ASSIGNMENT = Assignment(3, MappingProxyType({"0_0": TaskAssignment("1", ("2",)), "0_1": TaskAssignment("2", ("1",))}))


def test_a_pod_goes_only_once_the_assignment_gives_it_no_copy() -> None:
    holding = _pod("app-exec-2", "n2", "2")
    assert drained([holding], {"n2"}, ASSIGNMENT, taken=True) == []
    emptied = Assignment(4, MappingProxyType({"0_0": TaskAssignment("1", ("3",)), "0_1": TaskAssignment("3", ("1",))}))
    assert drained([holding], {"n2"}, emptied, taken=True) == [holding]
    # not before the driver runs that assignment: its runner would keep its actives with no one to ask it
    assert drained([holding], {"n2"}, emptied, taken=False) == []
    # not on a draining node: stays, whatever it holds
    assert drained([_pod("app-exec-4", "n1", "4")], {"n2"}, emptied, taken=True) == []


def test_pods_that_do_not_run_go_at_once_and_unregistered_running_ones_wait() -> None:
    failed = _pod("app-exec-5", "n2", "5", phase="Failed")
    pending = _pod("app-exec-6", "n2", None, phase="Pending")
    registering = _pod("app-exec-7", "n2", "EXECID")  # through a driver restart: its runner may hold actives
    gone = _pod("app-exec-8", "n2", "8", deleting=True)
    for taken in (True, False):
        assert drained([failed, pending, registering, gone], {"n2"}, ASSIGNMENT, taken) == [failed, pending]


def test_the_hand_over_is_on_unless_the_operator_is_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HAND_OVER_ENV, raising=False)
    assert hands_over()
    monkeypatch.setenv(HAND_OVER_ENV, "false")
    assert not hands_over()
    spec = StreamAppSpec.from_manifest({**example("ns"), "metadata": {"name": "wordcount", "namespace": "ns"}})
    owner = Owner("wordcount", "uid-1")
    assert build_executor_pdb(spec, owner)["spec"]["maxUnavailable"] == 0
    assert build_executor_pdb(spec, owner, hand_over=False)["spec"]["maxUnavailable"] == 1
