"""The orchestrator's pure part: which executors of the last published assignment are lost, why,
and which actives fail over with them."""

from __future__ import annotations

import json
from dataclasses import replace
from types import MappingProxyType

import pytest

from eddy_contract.assignor import Assignment, Executor, TaskAssignment
from eddy_contract.channel import (
    AssignmentMessage,
    ExecutorInventory,
    RuntimeState,
    decode_assignment,
    encode_assignment,
)
from eddy_operator.executor_ids import (
    Incarnations,
    carried_ids,
    driver_life_started,
    executor_renames,
    held_by_live_id,
    renamed,
    reregistering,
    reused,
)
from eddy_operator.pods import LossReason, LostExecutor, PodInfo, live_executors, lost_executors, pod_info
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


def killed_jvm_pod(container_state: dict) -> PodInfo:
    """An executor pod whose JVM was SIGKILLed: the entrypoint ended the container, which restarts."""
    return pod_info({
        "metadata": {"name": "wc-exec-1", "labels": {"spark-role": "executor", "spark-exec-id": "1"}},
        "spec": {"nodeName": "node-a"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
                   "containerStatuses": [{"name": "executor", "restartCount": 1, "state": container_state,
                                          "lastState": {"terminated": {"exitCode": 137, "reason": "Error"}}}]},
    })


@pytest.mark.parametrize("state", [{"terminated": {"exitCode": 137, "reason": "Error"}},
                                   {"waiting": {"reason": "CrashLoopBackOff"}}])
def test_an_executor_whose_jvm_was_killed_is_lost_because_its_container_exited(state: dict) -> None:
    pod = killed_jvm_pod(state)
    assert not pod.live_executor
    live = [Executor("2", "wc-exec-2"), Executor("3", "wc-exec-3")]
    assert lost_executors(PUBLISHED, live, [pod]) == [
        LostExecutor(Executor("1", "wc-exec-1"), LossReason.EXITED, ("0_0", "0_2"))]


def test_a_pod_whose_container_runs_again_is_not_called_exited() -> None:
    assert not killed_jvm_pod({"running": {"startedAt": "2026-11-27T10:00:00Z"}}).exited


def test_an_executor_on_a_node_that_is_down_is_lost_though_its_pod_still_says_ready() -> None:
    # the kubelet is gone: the pod's status (running, ready) is the last it sent
    pods = [PodInfo(f"wc-exec-{i}", "executor", str(i), node, "Running", True, False, None, None, running=True)
            for i, node in ((1, "node-a"), (2, "node-b"), (3, "node-b"))]
    live = live_executors(pods, {}, "zone", down_nodes={"node-a": "2026-11-27T10:00:00Z"})
    assert [e.id for e in live] == ["2", "3"]
    assert lost_executors(PUBLISHED, live, pods, {"node-a": "2026-11-27T10:00:00Z"}) == [
        LostExecutor(Executor("1", "wc-exec-1"), LossReason.NODE_DOWN, ("0_0", "0_2"))]


def test_an_executor_whose_runner_stopped_answering_is_lost_before_its_node_is_down() -> None:
    pods = [PodInfo(f"wc-exec-{i}", "executor", str(i), "node-a", "Running", True, False, None, None, running=True)
            for i in (1, 2, 3)]
    live = live_executors(pods, {}, "zone", unreachable={"wc-exec-2"})
    assert [e.id for e in live] == ["1", "3"]
    assert lost_executors(PUBLISHED, live, pods, unreachable={"wc-exec-2"}) == [
        LostExecutor(Executor("2", "wc-exec-2"), LossReason.UNREACHABLE, ("0_1",))]
    # once its node is down too, that is the reason given
    assert lost_executors(PUBLISHED, live, pods, {"node-a": "2026-11-27T10:00:00Z"}, {"wc-exec-2"})[0].reason \
        == LossReason.NODE_DOWN


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

    def pod(name: str, exec_id: str | None, *, ready: bool = True, phase: str = "Running", running: bool = True,
            deleting: bool = False, started: str = "2025-01-01T00:00:00Z") -> PodInfo:
        return PodInfo(name, "executor", exec_id, "node-a", phase, ready, deleting, None, None, running=running,
                       started_at="2025-01-01T00:00:00Z", running_since=started if running else None)

    # a new driver handed id 1 to wc-exec-2 first; wc-exec-1 (the earlier 1) has not registered yet
    pods = [pod("wc-exec-1", "EXECID"), pod("wc-exec-2", "1"), pod("wc-exec-3", None)]
    assert reregistering(PUBLISHED, pods, driver) == ["wc-exec-1", "wc-exec-3"]
    # a pod made again under a known name, or a container started again, after the driver
    # started is a new executor: lost, not awaited
    assert reregistering(PUBLISHED, [pod("wc-exec-1", "EXECID", started="2025-01-01T00:10:05Z")], driver) == []
    assert reregistering(PUBLISHED, [pod("wc-exec-1", "EXECID", running=False)], driver) == []  # ended
    # a runner going on through the restart with a copy behind (or slow to answer its readiness
    # probe) is not ready, and outlived the driver all the same
    assert reregistering(PUBLISHED, [pod("wc-exec-1", "EXECID", ready=False)], driver) == ["wc-exec-1"]
    assert reregistering(PUBLISHED, [pod("wc-exec-1", "EXECID", deleting=True)], driver) == []
    assert reregistering(PUBLISHED, [pod("wc-exec-1", "EXECID", phase="Pending")], driver) == []
    assert reregistering(PUBLISHED, [pod("wc-exec-9", "EXECID")], driver) == []  # not one of the assignment's
    assert reregistering(PUBLISHED, [pod("wc-exec-1", "4")], driver) == []  # registered
    assert reregistering(None, pods, driver) == []
    assert reregistering(PUBLISHED, pods, None) == []  # no driver pod


def test_a_driver_restarted_in_its_pod_starts_a_new_life_that_the_pods_which_outlived_it_register_with() -> None:
    # the driver pod made at 00:10; its node died and came back, and its container started again at 00:20
    def driver(running_since: str | None, deleting: bool = False) -> PodInfo:
        return PodInfo("wc-driver-0", "driver", None, "node-c", "Running", running_since is not None, deleting, None,
                       None, started_at="2025-01-01T00:10:00Z", running_since=running_since)

    assert driver_life_started([driver("2025-01-01T00:20:00Z")]) == "2025-01-01T00:20:00Z"
    assert driver_life_started([driver(None)]) == "2025-01-01T00:10:00Z"  # its container not running (yet)
    assert driver_life_started([driver("2025-01-01T00:20:00Z", deleting=True)]) is None
    # an executor pod made at 00:15 (after the pod, before its container started again) outlived it
    survivor = PodInfo("wc-exec-2", "executor", "EXECID", "node-a", "Running", True, False, None, None,
                       started_at="2025-01-01T00:15:00Z", running=True, running_since="2025-01-01T00:15:00Z")
    assert reregistering(PUBLISHED, [survivor], driver_life_started([driver("2025-01-01T00:20:00Z")])) == [
        "wc-exec-2"]


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


def labelled_pod(exec_id: str, restarts: int, *, uid: str = "uid-1") -> PodInfo:
    return PodInfo("wc-exec-1", "executor", exec_id, "node-a", "Running", False, False, None, None,
                   running=True, restarts=restarts, uid=uid)


def test_a_restarted_container_under_its_old_executor_id_is_not_live_until_spark_labels_it_anew() -> None:
    # A SIGKILLed executor's container runs again before its new JVM registered: the pod still says
    # executor 1, which ended with the old container. Taken for live, it got its actives back a
    # second after they failed over, and lost them again (two ExecutorLost Events for one kill).
    incarnations = Incarnations()
    assert not incarnations.mark([labelled_pod("1", 0)])[0].stale_id
    restarted = incarnations.mark([labelled_pod("1", 1)])[0]
    assert restarted.stale_id and not restarted.live_executor
    live = live_executors([restarted], {}, "zone")
    assert live == []
    assert lost_executors(PUBLISHED, live, [restarted])[0] == \
        LostExecutor(Executor("1", "wc-exec-1"), LossReason.EXITED, ("0_0", "0_2"))
    assert incarnations.mark([labelled_pod("1", 1)])[0].stale_id  # still, on the next look
    # the new JVM registered: a new executor, live
    assert incarnations.mark([labelled_pod("4", 1)])[0].live_executor
    assert not incarnations.mark([labelled_pod("4", 1)])[0].stale_id


def test_a_new_jvm_labelled_before_the_kubelet_reports_its_container_s_restart_is_not_stale() -> None:
    # The restarted container's JVM registered (as 4) and Spark labelled the pod before the pod's
    # status said the container restarted: the operator saw label 4 with the old restart count,
    # then the same label with one more restart. The driver's state names executor 4 at the pod's
    # address, published after the new container started: 4 is that container's.
    def pod(restarts: int) -> PodInfo:
        return replace(labelled_pod("4", restarts), ip="10.244.0.6", running_since="2026-11-30T12:58:50Z")

    def state(at: str, host: str = "10.244.0.6") -> RuntimeState:
        return RuntimeState("wc", at, 4, MappingProxyType({}),
                            executors=MappingProxyType({"4": ExecutorInventory("4", host=host)}))

    incarnations = Incarnations()
    assert not incarnations.mark([pod(0)])[0].stale_id
    after = state("2026-11-30T12:58:51.500000+00:00")
    assert incarnations.mark([pod(1)], runtime=after)[0].live_executor
    assert incarnations.mark([pod(1)], runtime=after)[0].live_executor  # and on the next look
    # without such a state (none yet, one from before the new container, another address) the id
    # is taken for the old container's, as before
    assert incarnations.mark([pod(1)])[0].stale_id
    assert incarnations.mark([pod(1)], runtime=state("2026-11-30T12:58:50.400000+00:00"))[0].stale_id
    assert incarnations.mark([pod(1)], runtime=state("2026-11-30T12:58:52+00:00", host="10.244.0.9"))[0].stale_id


def test_a_pod_made_again_under_its_name_or_relabelled_by_a_new_driver_is_not_stale() -> None:
    incarnations = Incarnations()
    incarnations.mark([labelled_pod("1", 3)])
    # the same name, a new pod (deleted, made again by its StatefulSet)
    assert incarnations.mark([labelled_pod("1", 0, uid="uid-2")])[0].live_executor
    # a new driver hands the same pod (no restart) a new id
    assert incarnations.mark([labelled_pod("7", 0, uid="uid-2")])[0].live_executor


def test_an_executor_id_moves_to_the_new_id_only_with_the_same_container_life() -> None:
    # A new driver relabels a pod that outlived the old one (same uid, no restart): the same
    # executor, which keeps its tasks. A pod made again under its name, or a container restarted,
    # is a new executor: its predecessor is lost (its tasks fail over), not renamed.
    incarnations = Incarnations()
    message = AssignmentMessage("wc", Assignment(1, MappingProxyType({"0_0": TaskAssignment("1", ())})),
                                (Executor("1", "wc-exec-1"),), "2025-01-01T00:00:00.000Z")
    incarnations.mark([labelled_pod("1", 0)], keep=[("wc-exec-1", "1")])
    live = [Executor("5", "wc-exec-1")]
    for pod, renames in ((labelled_pod("5", 0), {"1": "5"}),  # a new driver
                         (labelled_pod("5", 0, uid="uid-2"), {}),  # the pod made again
                         (labelled_pod("5", 1), {})):  # its container restarted
        assert executor_renames(message, live, lambda old, _, p=pod: incarnations.carried_over(old, p)) == renames
    # an id this operator never saw on a pod (it took over since) is taken to have moved
    assert Incarnations().carried_over("1", labelled_pod("5", 1))


def test_an_operator_that_takes_over_knows_each_executor_s_container_life_from_the_assignment() -> None:
    # The leader that published the assignment saw executor 1 on wc-exec-1's first container life;
    # one that took over since, while the pod was made again, must not rename 1 to the new pod's id.
    before = Incarnations()
    before.mark([labelled_pod("1", 0)])
    message = AssignmentMessage("wc", Assignment(1, MappingProxyType({"0_0": TaskAssignment("1", ())})),
                                (Executor("1", "wc-exec-1"),), "2025-01-01T00:00:00.000Z",
                                lives={"1": before.life("1", "wc-exec-1") or ""})
    published = decode_assignment(encode_assignment(message))
    assert published.lives == {"1": "uid-1/0"}
    after = Incarnations()
    after.learn(published)
    assert not after.carried_over("1", labelled_pod("5", 0, uid="uid-2"))
    assert after.carried_over("1", labelled_pod("5", 0))
    assert renamed(published, {"1": "5"}).lives == {"5": "uid-1/0"}
    # and a pod between its container's restart and its new label carries a stale id
    fresh = Incarnations()
    fresh.learn(published)
    assert fresh.mark([labelled_pod("1", 1)], keep=[("wc-exec-1", "1")])[0].stale_id


def test_a_leader_that_takes_over_after_a_container_restarted_knows_the_pod_s_id_is_stale() -> None:
    # Executor 5's JVM is killed: the leader sees its pod, still labelled 5, restarted, fails 5 over
    # and publishes an assignment that no longer names it. Then the leader dies. Its successor never
    # saw the pod before the restart: from the assignment alone it took the label for live and lost
    # executor 5 a second time (two ExecutorLost Events for one fault, bench/chaos.py run 4).
    before = Incarnations()
    before.mark([labelled_pod("5", 0)])
    assert before.mark([labelled_pod("5", 1)])[0].stale_id
    kept = json.loads(json.dumps(before.labels_seen()))  # beside the assignment, in its ConfigMap
    assert kept == {"uid-1": "5/0"}
    unaware = Incarnations()
    assert unaware.mark([labelled_pod("5", 1)])[0].live_executor  # what the successor did
    after = Incarnations()
    after.learn_labels(kept)
    assert after.mark([labelled_pod("5", 1)])[0].stale_id
    # once the new JVM registers, the pod is a live executor under its new id
    assert after.mark([labelled_pod("6", 1)])[0].live_executor
    # a pod the last leader never saw, or one made again under its name, is judged afresh
    assert not after.mark([labelled_pod("2", 4, uid="uid-9")])[0].stale_id
    seen = after.labels_seen()
    after.learn_labels({"uid-1": "bad", "uid-3": "1/x"})  # unreadable entries are skipped
    assert after.labels_seen() == seen


def test_a_new_driver_may_hand_an_id_out_again_to_the_same_pod_after_its_container_restarted() -> None:
    # Spark counts ids per driver: executor 1's pod, relabelled EXECID by a new driver, restarted,
    # and got id 1 again from it. That is a new label, not the stale one.
    incarnations = Incarnations()
    incarnations.mark([labelled_pod("1", 0)])
    incarnations.mark([labelled_pod("EXECID", 0)], keep=[("wc-exec-1", "1")])
    incarnations.mark([labelled_pod("EXECID", 1)], keep=[("wc-exec-1", "1")])
    assert incarnations.mark([labelled_pod("1", 1)], keep=[("wc-exec-1", "1")])[0].live_executor


def test_an_id_a_new_driver_handed_to_another_pod_is_not_the_last_assignment_s_executor() -> None:
    # The last assignment's executor 1 ran on wc-exec-1; a new driver handed 1 to wc-exec-3 and
    # wc-exec-1 (its container restarted: not renamed) awaits its id. Executor 1 of the assignment
    # is lost, under a name of its own, and its actives fail over.
    live = [Executor("1", "wc-exec-3"), Executor("2", "wc-exec-2")]
    taken = reused(PUBLISHED, live)
    assert taken == {"1": "1@wc-exec-1"}
    lost = lost_executors(renamed(PUBLISHED, taken), live, [executor_pod("wc-exec-1"), executor_pod("wc-exec-3")])
    assert [(g.executor.id, g.moved) for g in lost] == [("1@wc-exec-1", ("0_0", "0_2")), ("3", ())]


def test_an_executor_renamed_to_the_id_of_one_lost_leaves_one_executor_per_id() -> None:
    # bench/chaos.py: executor 1's node died while a new driver started; the new driver handed id 1
    # to wc-exec-2, which outlived the old driver (renamed 2 -> 1), and 3 to wc-exec-3. Executor 1 of
    # the assignment, on wc-exec-1, is lost under a name of its own; wc-exec-2 keeps its tasks.
    live = [Executor("1", "wc-exec-2"), Executor("3", "wc-exec-3")]
    renames = carried_ids(PUBLISHED, live)
    assert renames == {"1": "1@wc-exec-1", "2": "1"}
    moved = renamed(PUBLISHED, renames)
    assert [(e.id, e.pod) for e in moved.executors] == [("1@wc-exec-1", "wc-exec-1"), ("1", "wc-exec-2"),
                                                        ("3", "wc-exec-3")]
    lost = lost_executors(moved, live, [executor_pod("wc-exec-1")])
    assert [(g.executor.id, g.executor.pod, g.moved) for g in lost] == [("1@wc-exec-1", "wc-exec-1", ("0_0", "0_2"))]
    # renaming first and looking for taken ids after (as the operator did) put both under 1@wc-exec-1
    both = renamed(PUBLISHED, executor_renames(PUBLISHED, live))
    assert [e.pod for e in renamed(both, reused(both, live)).executors if e.id == "1@wc-exec-1"] \
        == ["wc-exec-1", "wc-exec-2"]


def test_a_new_driver_that_swaps_two_pods_ids_keeps_each_pod_s_tasks() -> None:
    # e2e/test_changes.py: the new driver handed 2 to executor 1's pod and 1 to executor 2's; both
    # outlived the old driver (same container life), so both are renamed, at once.
    incarnations = Incarnations()
    pods = [labelled_pod("1", 0), replace(labelled_pod("2", 0, uid="uid-2"), name="wc-exec-2")]
    incarnations.mark(pods)
    message = AssignmentMessage("wc", Assignment(1, MappingProxyType({"0_0": TaskAssignment("1", ("2",))})),
                                (Executor("1", "wc-exec-1"), Executor("2", "wc-exec-2")), "2025-01-01T00:00:00.000Z")
    keep = [("wc-exec-1", "1"), ("wc-exec-2", "2")]
    swapped = incarnations.mark([replace(pods[0], exec_id="2"), replace(pods[1], exec_id="1")], keep=keep)
    by_name = {p.name: p for p in swapped}
    live = [Executor("2", "wc-exec-1"), Executor("1", "wc-exec-2")]
    assert executor_renames(message, live, lambda old, pod: incarnations.carried_over(old, by_name[pod])) \
        == {"1": "2", "2": "1"}
