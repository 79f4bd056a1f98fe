"""Status computation and executor discovery from pods (pure parts of the operator)."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from eddy_contract.assignor import Assignment, Executor, TaskAssignment, TaskMove
from eddy_contract.channel import RestoreProgress, RuntimeState
from eddy_operator.assignment_events import describe_moves
from eddy_operator.pods import live_executors, pod_info
from eddy_operator.status import Failover, Observed, compute_status, without_times

pytestmark = pytest.mark.unit

ASSIGNMENT = Assignment(
    4,
    MappingProxyType(
        {
            "0_0": TaskAssignment("1", ("2",)),
            "0_1": TaskAssignment("2", ("1",), ("3",)),
        }
    ),
)


def observed(**changes):
    base = dict(
        now="2025-01-01T00:00:00.000Z",
        generation=2,
        selector="spark-app-selector=wc,spark-role=executor",
        desired_executors=2,
        ready_executors=2,
        standby_replicas=1,
        driver_pod="wc-driver-0",
        driver_ready=True,
        assignment=ASSIGNMENT,
    )
    base.update(changes)
    return Observed(**base)


def conditions(status):
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_a_healthy_app_is_running_and_ready():
    s = compute_status(observed())
    assert s["phase"] == "Running"
    assert conditions(s) == {
        "Ready": ("True", "TasksRunning"),
        "Progressing": ("True", "WarmingUp"),
        "Degraded": ("False", "AsExpected"),
        "UpgradeRefused": ("False", "Compatible"),
        "RolledBack": ("False", "Healthy"),
    }
    assert s["tasks"] == {"total": 2, "running": 2, "restoring": 0, "standby": 2, "warmup": 1}
    assert s["assignmentGeneration"] == 4
    assert s["observedGeneration"] == 2
    assert all(c["observedGeneration"] == 2 for c in s["conditions"])


def test_losing_an_executor_keeps_the_app_ready_but_degraded():
    s = compute_status(observed(ready_executors=1))
    assert s["phase"] == "Degraded"
    assert conditions(s)["Ready"] == ("True", "TasksRunning")
    assert conditions(s)["Degraded"] == ("True", "ExecutorsUnavailable")
    assert s["executors"] == {"desired": 2, "ready": 1}


def test_a_rolling_upgrade_is_progress_that_says_how_many_pods_are_left():
    s = compute_status(observed(outdated_executors=1, ready_executors=1))
    assert conditions(s)["Progressing"] == ("True", "RollingUpgrade")
    assert "1 of 2 executor pod(s) at the old pod template" in {c["type"]: c for c in s["conditions"]}[
        "Progressing"]["message"]


def test_an_active_restoring_makes_the_app_not_ready_and_reports_progress():
    runtime = RuntimeState(
        "wc",
        "t",
        4,
        MappingProxyType({"0_0": {"s": 100}}),
        restores=(RestoreProgress("0_0", "1", "active", 40, 100), RestoreProgress("0_1", "3", "warmup", 100, 100)),
    )
    s = compute_status(observed(runtime=runtime))
    assert s["phase"] == "Restoring"
    assert conditions(s)["Ready"] == ("False", "Restoring")
    assert s["tasks"]["restoring"] == 1
    assert s["restoring"] == [
        {"task": "0_0", "executor": "1", "role": "active", "lag": 60, "restored": 40, "total": 100}
    ]


def test_phases_before_the_app_runs():
    assert compute_status(observed(driver_pod=None, assignment=None))["phase"] == "Pending"
    s = compute_status(observed(driver_ready=False))
    assert s["phase"] == "Deploying"
    assert conditions(s)["Progressing"] == ("True", "DeployingDriver")
    s = compute_status(observed(assignment=None))
    assert conditions(s)["Ready"] == ("False", "AwaitingAssignment")
    s = compute_status(observed(spec_error="spec.state.size: bad"))
    assert s["phase"] == "Failed" and conditions(s)["Ready"] == ("False", "InvalidSpec")


def test_transition_time_changes_only_when_a_condition_flips():
    first = compute_status(observed(now="2025-01-01T00:00:00.000Z"))
    same = compute_status(observed(now="2025-01-01T00:05:00.000Z"), first)
    assert [c["lastTransitionTime"] for c in same["conditions"]] == [
        c["lastTransitionTime"] for c in first["conditions"]
    ]
    assert without_times(same) == without_times(first)
    flipped = compute_status(observed(now="2025-01-01T00:06:00.000Z", ready_executors=1), same)
    times = {c["type"]: c["lastTransitionTime"] for c in flipped["conditions"]}
    assert times["Degraded"] == "2025-01-01T00:06:00.000Z"
    assert times["Ready"] == "2025-01-01T00:00:00.000Z"


def test_last_failover_is_reported_and_kept_across_operator_restarts():
    fo = Failover("2025-01-01T00:00:01.000Z", "3", "deleted", ("0_1", "0_4"), 0.0123)
    s = compute_status(observed(last_failover=fo))
    assert s["lastFailover"] == {
        "time": "2025-01-01T00:00:01.000Z",
        "executor": "3",
        "reason": "deleted",
        "tasksMoved": 2,
        "tasks": ["0_1", "0_4"],
        "durationSeconds": 0.0123,
    }
    assert compute_status(observed(), s)["lastFailover"] == s["lastFailover"]
    assert Failover.from_status(s["lastFailover"]) == fo  # as the next leader reads it back


def pod(name, exec_id="1", phase="Running", ready=True, deleting=False, node="node-a", reason=None, role="executor"):
    body = {
        "metadata": {
            "name": name,
            "labels": {"spark-role": role, "eddy.dev/app": "wc", **({"spark-exec-id": exec_id} if exec_id else {})},
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    if reason:
        body["status"]["reason"] = reason
    return pod_info(body)


def test_only_running_ready_registered_executors_are_live_with_their_node_zone():
    pods = [
        pod("e1", "1"),
        pod("e2", "2", node="node-b"),
        pod("e3", "EXECID"),  # not registered with the driver yet
        pod("e4", "4", deleting=True),
        pod("e5", "5", phase="Failed", reason="Evicted"),
        pod("e6", "6", ready=False),
        pod("e7", "7", phase="Pending", node=None),
        pod("driver", None, role="driver"),
    ]
    nodes = {"node-a": {"topology.kubernetes.io/zone": "zone-a"}, "node-b": {"topology.kubernetes.io/zone": "zone-b"}}
    assert live_executors(pods, nodes, "topology.kubernetes.io/zone") == [
        Executor("1", "e1", "zone-a"),
        Executor("2", "e2", "zone-b"),
    ]
    assert pods[3].loss_reason == "deleted"
    assert pods[4].loss_reason == "evicted"
    assert pods[5].loss_reason == "not ready"


def test_events_name_each_active_move_and_group_replica_placement():
    moves = [
        TaskMove("0_1", "promoted", "1", "2"),
        TaskMove("0_2", "moved", "1", "3"),
        TaskMove("0_1", "standby-added", None, "3"),
        TaskMove("0_2", "standby-added", None, "2"),
        TaskMove("0_3", "warmup-added", None, "3"),
    ]
    events = describe_moves(moves, {"2": "pod-2", "3": "pod-3"})
    assert events[0] == (
        "TaskPromoted",
        "task 0_1: standby on executor 2 (pod-2) promoted to active, was on executor 1",
    )
    assert events[1] == ("TaskMoved", "task 0_2: active moved from executor 1 to executor 3 (pod-3)")
    assert ("StandbysPlaced", "2: 0_1@3, 0_2@2") in events
    assert ("WarmupsPlaced", "1: 0_3@3") in events


def _shape_mismatches(value, schema, path="status"):
    """Where `value` and the schema's properties differ: keys produced but not declared, or
    declared but never produced (objects and arrays of objects, all the way down)."""
    out = []
    if schema.get("type") == "object" and "properties" in schema:
        assert isinstance(value, dict), f"{path}: {value!r} is not an object"
        declared, produced = set(schema["properties"]), set(value)
        out += [f"{path}.{k}: produced, not in the CRD's schema" for k in sorted(produced - declared)]
        out += [f"{path}.{k}: in the CRD's schema, never produced" for k in sorted(declared - produced)]
        for k in sorted(declared & produced):
            out += _shape_mismatches(value[k], schema["properties"][k], f"{path}.{k}")
    elif schema.get("type") == "array" and "items" in schema:
        assert isinstance(value, list) and value, f"{path}: needs at least one item to compare ({value!r})"
        for i, item in enumerate(value):
            out += _shape_mismatches(item, schema["items"], f"{path}[{i}]")
    return out


def test_compute_status_produces_exactly_the_fields_of_the_crds_status_schema():
    from tests.operator.manifests import crd

    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    runtime = RuntimeState("wc", "t", 4, MappingProxyType({"0_0": {"s": 100}}),
                           restores=(RestoreProgress("0_0", "2", "standby", 40, 100),))
    failover = Failover("2025-01-01T00:00:00.000Z", "3", "pod deleted", ("0_1",), 0.02)
    autoscaling = {"executors": 2, "recommended": 3, "reason": "r", "holding": "h", "inputRate": 10.5,
                   "processedRate": 9.5, "backlog": 100, "busyPercent": 71.2, "perRoundPercent": 50.3,
                   "capacityPerExecutor": 20.1,
                   "lastDecision": {"time": "2025-01-01T00:00:00.000Z", "from": 1, "to": 2, "reason": "r"}}
    status = compute_status(observed(runtime=runtime, last_failover=failover, autoscaling=autoscaling))
    assert _shape_mismatches(status, schema) == []
    # and the other way round: every field in the schema names something compute_status writes
    assert set(status) == set(schema["properties"])


def test_standbys_and_warmups_catching_up_are_listed_with_their_progress():
    runtime = RuntimeState(
        "wc", "t", 4, MappingProxyType({"0_0": {"s": 100}, "0_1": {"s": 900}}),
        restores=(RestoreProgress("0_0", "2", "standby", 90, 100), RestoreProgress("0_1", "3", "warmup", 300, 900)),
    )
    s = compute_status(observed(runtime=runtime))
    assert s["restoring"] == [
        {"task": "0_0", "executor": "2", "role": "standby", "lag": 10, "restored": 90, "total": 100},
        {"task": "0_1", "executor": "3", "role": "warmup", "lag": 600, "restored": 300, "total": 900},
    ]
    # Standbys behind are not actives restoring: the app stays ready.
    assert s["phase"] == "Running" and s["tasks"]["restoring"] == 0
    assert conditions(s)["Ready"] == ("True", "TasksRunning")


def test_a_refused_or_rolled_back_version_shows_in_the_conditions():
    from eddy_operator.upgrades import Rejection, RejectionKind

    refused = Rejection(RejectionKind.REFUSED, "store 'counts' removed", "t", "aaaa")
    s = compute_status(observed(wanted_version="bbbb", rejection=refused))
    cond = next(c for c in s["conditions"] if c["type"] == "UpgradeRefused")
    assert (cond["status"], cond["reason"]) == ("True", "IncompatibleTopology")
    assert "bbbb" in cond["message"] and "aaaa" in cond["message"] and "store 'counts' removed" in cond["message"]
    failed = Rejection(RejectionKind.FAILED, "the driver container restarted 3 times", "t", "aaaa")
    assert conditions(compute_status(observed(wanted_version="bbbb", rejection=failed)))["RolledBack"] == (
        "True", "HealthGateFailed")
