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
    assert replacing(pods, APP) == pods[1]
    # the pod replaced before is back but not warm yet: nothing more goes
    assert replacing([_pod(0, "1"), _pod(1, "2", outdated=False, ready=False)], APP) is None
    # ... nor while one is going away
    assert replacing([_pod(0, "1"), _pod(1, "2", outdated=False, deleting=True)], APP) is None
    # ... nor while one is ready but not registered with the driver yet (no copy could go to it)
    assert replacing([_pod(0, "1"), _pod(1, "EXECID", outdated=False)], APP) is None
    # the candidate itself need not be ready (it may be warming after a driver restart)
    assert replacing([_pod(0, "1", outdated=False), _pod(1, "2", ready=False)], APP) is not None
    # ten sorts after two
    assert replacing([_pod(2, "1"), _pod(10, "2")], APP).name.endswith("-10")  # type: ignore[union-attr]
    assert replacing([_pod(0, "1", outdated=False), _pod(1, "2", outdated=False)], APP) is None


def test_an_outdated_pod_goes_once_it_holds_no_copy_and_the_driver_runs_that_assignment() -> None:
    pods = [_pod(0, "1"), _pod(1, "2")]
    holding = Assignment(5, MappingProxyType({"0_0": TaskAssignment("2", ("1",)), "0_1": TaskAssignment("1")}))
    emptied = Assignment(6, MappingProxyType({"0_0": TaskAssignment("1"), "0_1": TaskAssignment("1")}))
    assert not replaceable(pods[1], pods, holding, taken=True)
    assert not replaceable(pods[1], pods, emptied, taken=False)  # the driver has not asked its runner yet
    assert replaceable(pods[1], pods, emptied, taken=True)


def test_an_outdated_pod_that_is_not_running_or_is_the_only_executor_goes_at_once() -> None:
    holding = Assignment(5, MappingProxyType({"0_0": TaskAssignment("1")}))
    alone = _pod(0, "1")
    assert replaceable(alone, [alone], holding, taken=True)  # nowhere to hand its tasks: restored from its volume
    pending = _pod(1, None, phase="Pending", ready=False)
    assert replaceable(pending, [_pod(0, "1"), pending], holding, taken=True)
    # another pod, even one not registered yet, is where its tasks will go: it waits
    assert not replaceable(alone, [alone, _pod(1, "EXECID", outdated=False, ready=False)], holding, taken=True)


def test_the_driver_marks_an_outdated_pod_with_an_annotation() -> None:
    pod = {"metadata": {"name": f"{executor_statefulset_name(APP)}-0", "labels": {"spark-role": "executor"},
                        "annotations": {"eddy.dev/outdated": "rev-2"}}, "status": {"phase": "Running"}}
    assert pod_info(pod).outdated
    del pod["metadata"]["annotations"]
    assert not pod_info(pod).outdated
