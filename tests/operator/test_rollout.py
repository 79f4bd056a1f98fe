"""A rolling upgrade's pod replacements (eddy_operator.rollout): one outdated executor pod at a
time, highest ordinal first, once every other one is warm; deleted once the published assignment
gives it no copy and the driver runs it, at once where it is not running or the only executor."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from eddy_contract.assignor import Assignment, TaskAssignment
from eddy_operator.builders import executor_statefulset_name
from eddy_operator.pods import PodInfo, pod_info
from eddy_operator.rollout import replaceable, replacing

pytestmark = pytest.mark.unit

APP = "wc"


def _pod(ordinal: int, exec_id: str | None, outdated: bool = True, phase: str = "Running", ready: bool = True,
         deleting: bool = False) -> PodInfo:
    return PodInfo(name=f"{executor_statefulset_name(APP)}-{ordinal}", role="executor", exec_id=exec_id, node="n1",
                   phase=phase, ready=ready, deleting=deleting, reason=None, zone_label=None,
                   running=phase == "Running", outdated=outdated)


def test_the_outdated_pod_with_the_highest_ordinal_goes_first_once_every_other_pod_is_warm() -> None:
    pods = [_pod(0, "1"), _pod(1, "2"), _pod(2, "3", outdated=False)]
    assert replacing(pods, APP, 3) == pods[1]
    # the pod replaced before is back but not warm yet: nothing more goes
    assert replacing([_pod(0, "1"), _pod(1, "2", outdated=False, ready=False)], APP, 2) is None
    # ... nor while one is going away
    assert replacing([_pod(0, "1"), _pod(1, "2", outdated=False, deleting=True)], APP, 2) is None
    # ... nor while one is gone and not made again yet
    assert replacing([_pod(0, "1")], APP, 2) is None
    # ... nor while one is ready but not registered with the driver yet (no copy could go to it)
    assert replacing([_pod(0, "1"), _pod(1, "EXECID", outdated=False)], APP, 2) is None
    # the candidate itself need not be ready (it may be warming after a driver restart)
    assert replacing([_pod(0, "1", outdated=False), _pod(1, "2", ready=False)], APP, 2) is not None
    # ten sorts after two
    pods = [_pod(n, str(n + 1), outdated=n in (2, 10)) for n in range(11)]
    assert replacing(pods, APP, 11) == pods[10]
    assert replacing([_pod(0, "1", outdated=False), _pod(1, "2", outdated=False)], APP, 2) is None
    # a pod past the wanted count leaves with the scale-in, not the rollout
    assert replacing([_pod(0, "1", outdated=False), _pod(1, "2")], APP, 1) is None
    assert replacing([_pod(0, "1")], APP, 1) is not None


def test_an_outdated_pod_goes_once_it_holds_no_copy_and_the_driver_runs_that_assignment() -> None:
    pod = _pod(1, "2")
    holding = Assignment(5, MappingProxyType({"0_0": TaskAssignment("2", ("1",)), "0_1": TaskAssignment("1")}))
    emptied = Assignment(6, MappingProxyType({"0_0": TaskAssignment("1"), "0_1": TaskAssignment("1")}))
    assert not replaceable(pod, holding, taken=True, replicas=2)
    assert not replaceable(pod, emptied, taken=False, replicas=2)  # the driver has not asked its runner yet
    assert replaceable(pod, emptied, taken=True, replicas=2)


def test_an_outdated_pod_that_is_not_running_or_is_the_only_executor_goes_at_once() -> None:
    holding = Assignment(5, MappingProxyType({"0_0": TaskAssignment("1")}))
    # nowhere to hand its tasks: restored from its volume
    assert replaceable(_pod(0, "1"), holding, taken=True, replicas=1)
    assert replaceable(_pod(1, None, phase="Pending", ready=False), holding, taken=True, replicas=2)
    # another pod is wanted, gone for a moment or not: it waits for its tasks to go there
    assert not replaceable(_pod(0, "1"), holding, taken=True, replicas=2)


def test_the_driver_marks_an_outdated_pod_with_an_annotation() -> None:
    pod = {"metadata": {"name": f"{executor_statefulset_name(APP)}-0", "labels": {"spark-role": "executor"},
                        "annotations": {"eddy.dev/outdated": "rev-2"}}, "status": {"phase": "Running"}}
    assert pod_info(pod).outdated
    del pod["metadata"]["annotations"]
    assert not pod_info(pod).outdated
