"""The orchestrator's pure part: which executors of the last published assignment are lost, why,
and which actives fail over with them."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from eddy_contract.assignor import Assignment, Executor, TaskAssignment
from eddy_contract.channel import AssignmentMessage, ExecutorInventory, RuntimeState
from eddy_operator.executor_ids import executor_renames, held_by_live_id, renamed, reregistering
from eddy_operator.orchestrator import LostExecutor, lost_executors
from eddy_operator.pods import LossReason, PodInfo, live_executors
from eddy_operator.scaling import unknown_to_driver

pytestmark = pytest.mark.unit

PUBLISHED = AssignmentMessage(
    "wc",
    Assignment(3, MappingProxyType({
        "0_0": TaskAssignment("1", ("2",)),
        "0_1": TaskAssignment("2", ("1",)),
        "0_2": TaskAssignment("1", ("3",)),
    })),
    (Executor("1", "wc-exec-1"), Executor("2", "wc-exec-2"), Executor("3", "wc-exec-3")),
    "2025-01-01T00:00:00.000Z",
)


def executor_pod(name: str, *, phase: str = "Running", reason: str | None = None) -> PodInfo:
    return PodInfo(name, "executor", None, "node-a", phase, False, False, reason, None)


def test_nothing_is_lost_before_the_first_assignment() -> None:
    assert lost_executors(None, [Executor("1", "wc-exec-1")], []) == []


def test_an_executor_no_longer_live_is_lost_with_the_actives_it_held() -> None:
    live = [Executor("2", "wc-exec-2"), Executor("3", "wc-exec-3")]
    lost = lost_executors(PUBLISHED, live, [executor_pod("wc-exec-1", reason="Evicted")])
    assert lost == [LostExecutor(Executor("1", "wc-exec-1"), LossReason.EVICTED, ("0_0", "0_2"))]


def test_an_executor_whose_pod_is_gone_was_deleted_and_one_without_actives_moves_none() -> None:
    live = [Executor("1", "wc-exec-1")]
    lost = lost_executors(PUBLISHED, live, [executor_pod("wc-exec-3", phase="Failed")])
    assert lost == [
        LostExecutor(Executor("2", "wc-exec-2"), LossReason.DELETED, ("0_1",)),
        LostExecutor(Executor("3", "wc-exec-3"), LossReason.FAILED, ()),
    ]


def test_an_executor_on_a_node_that_is_down_is_lost_though_its_pod_still_says_ready() -> None:
    # the kubelet is gone: the pod's status (running, ready) is the last it sent
    pods = [PodInfo(f"wc-exec-{i}", "executor", str(i), node, "Running", True, False, None, None, running=True)
            for i, node in ((1, "node-a"), (2, "node-b"), (3, "node-b"))]
    live = live_executors(pods, {}, "zone", down_nodes={"node-a": "2026-11-27T10:00:00Z"})
    assert [e.id for e in live] == ["2", "3"]
    assert lost_executors(PUBLISHED, live, pods, {"node-a": "2026-11-27T10:00:00Z"}) == [
        LostExecutor(Executor("1", "wc-exec-1"), LossReason.NODE_DOWN, ("0_0", "0_2"))]


def test_a_restarted_driver_s_new_ids_on_the_same_pods_are_the_same_executors_even_when_ids_swap() -> None:
    # The new driver handed out ids anew: pod 2 registered first and got id 1, pod 1 got id 2.
    live = [Executor("1", "wc-exec-2"), Executor("2", "wc-exec-1"), Executor("4", "wc-exec-3")]
    renames = executor_renames(PUBLISHED, live)
    assert renames == {"1": "2", "2": "1", "3": "4"}
    moved = renamed(PUBLISHED, renames)
    assert dict(moved.assignment.tasks) == {
        "0_0": TaskAssignment("2", ("1",)),
        "0_1": TaskAssignment("1", ("2",)),
        "0_2": TaskAssignment("2", ("4",)),
    }
    assert moved.assignment.generation == 3
    assert [(e.id, e.pod) for e in moved.executors] == [("2", "wc-exec-1"), ("1", "wc-exec-2"), ("4", "wc-exec-3")]
    assert lost_executors(moved, live, []) == []


def test_pods_that_outlived_the_driver_and_have_no_new_id_yet_are_awaited() -> None:
    driver = "2025-01-01T00:10:00Z"

    def pod(name: str, exec_id: str | None, *, ready: bool = True, phase: str = "Running",
            deleting: bool = False, started: str = "2025-01-01T00:00:00Z") -> PodInfo:
        return PodInfo(name, "executor", exec_id, "node-a", phase, ready, deleting, None, None, started_at=started)

    # a new driver handed id 1 to wc-exec-2 first; wc-exec-1 (the earlier 1) has not registered yet
    pods = [pod("wc-exec-1", "EXECID"), pod("wc-exec-2", "1"), pod("wc-exec-3", None)]
    assert reregistering(PUBLISHED, pods, driver) == ["wc-exec-1", "wc-exec-3"]
    # a pod made again under a known name after the driver started is a new executor: lost, not awaited
    assert reregistering(PUBLISHED, [pod("wc-exec-1", "EXECID", started="2025-01-01T00:10:05Z")], driver) == []
    assert reregistering(PUBLISHED, [pod("wc-exec-1", "EXECID", ready=False)], driver) == []
    assert reregistering(PUBLISHED, [pod("wc-exec-1", "EXECID", deleting=True)], driver) == []
    assert reregistering(PUBLISHED, [pod("wc-exec-1", "EXECID", phase="Pending")], driver) == []
    assert reregistering(PUBLISHED, [pod("wc-exec-9", "EXECID")], driver) == []  # not one of the assignment's
    assert reregistering(PUBLISHED, [pod("wc-exec-1", "4")], driver) == []  # registered
    assert reregistering(None, pods, driver) == []
    assert reregistering(PUBLISHED, pods, None) == []  # no driver pod


def test_nothing_is_renamed_while_the_ids_are_the_same() -> None:
    assert executor_renames(PUBLISHED, list(PUBLISHED.executors)) == {}
    assert executor_renames(None, list(PUBLISHED.executors)) == {}


def test_what_a_volume_holds_follows_its_pod_to_the_new_id() -> None:
    state = RuntimeState(app="wc", updated_at="", assignment_generation=3, changelog_end_offsets={}, executors={
        "1": ExecutorInventory("1", "wc-exec-1", stores={"0_0": {"counts": 10}}),
        "2": ExecutorInventory("2", "wc-exec-2", stores={"0_1": {"counts": 20}}),
    })
    live = [Executor("7", "wc-exec-1"), Executor("2", "wc-exec-2")]
    assert held_by_live_id(state, live) == {"7": {"0_0": 10}, "2": {"0_1": 20}}


def test_an_executor_the_driver_has_not_named_yet_takes_no_new_copy_unless_it_holds_some():
    previous = Assignment(3, MappingProxyType({"0_0": TaskAssignment("1", ("2",)), "0_1": TaskAssignment("2", ("1",))}))
    named = RuntimeState("wc", "t", 3, MappingProxyType({"0_0": {}, "0_1": {}}),
                         executors=MappingProxyType({"1": ExecutorInventory("1"), "2": ExecutorInventory("2")}))
    executors = [Executor("1", "p-1"), Executor("2", "p-2"), Executor("5", "p-3")]
    # 5: back on its volume under a new id, its inventory not known yet
    assert unknown_to_driver(executors, named, previous) == ["5"]
    # 2 holds copies: it is never held back, named or not
    only_one = RuntimeState("wc", "t", 3, MappingProxyType({}),
                            executors=MappingProxyType({"1": ExecutorInventory("1")}))
    assert unknown_to_driver(executors, only_one, previous) == ["5"]
    # before any generation, or before the driver names anyone: nobody is held back
    assert unknown_to_driver(executors, named, None) == []
    assert unknown_to_driver(executors, RuntimeState("wc", "t", 3, MappingProxyType({})), previous) == []
