"""The autoscaler's part of the scaling steps (eddy_operator.scaling): what holds a recommendation
back, and what it writes to `status.autoscaling` (the operator patches the status with a JSON merge
patch, RFC 7386, which keeps every key a patch does not mention, so each status the autoscaler
writes must name every key it may carry)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from eddy_contract.assignor import Assignment, Executor, TaskAssignment
from eddy_contract.channel import AssignmentMessage, ExecutorInventory, RuntimeState
from eddy_operator.autoscaler import Rates
from eddy_operator.scaling import AUTOSCALING_STATUS_KEYS, autoscaling_status, warming

pytestmark = pytest.mark.unit


def _merge_patch(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386, as the apiserver applies `application/merge-patch+json` to a status."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            out[key] = _merge_patch(out.get(key) if isinstance(out.get(key), Mapping) else {}, value)
        else:
            out[key] = value
    return out


def _rates(capacity: float | None) -> Rates:
    return Rates(window_s=30, executors=3, processed=1200.0, backlog_growth=-10.0, backlog=300, capacity=capacity,
                 busy=0.4)


def test_a_recommendation_after_a_move_clears_the_hold_the_stored_status_had() -> None:
    held = autoscaling_status(3, _rates(2000.0), None)
    held["holding"] = "1 warmup(s) catching up"
    stored = _merge_patch({}, {"autoscaling": held})["autoscaling"]
    assert stored["holding"] == "1 warmup(s) catching up"

    later = autoscaling_status(3, _rates(None), {"time": "t", "from": 2, "to": 3, "reason": "r"})
    later.update(recommended=3, reason="1,190 records/s to process ...")
    stored = _merge_patch({"autoscaling": stored}, {"autoscaling": later})["autoscaling"]

    assert "holding" not in stored
    assert "capacityPerExecutor" not in stored  # not measured over the newest window
    assert stored["recommended"] == 3 and stored["lastDecision"]["to"] == 3 and stored["executors"] == 3


def test_every_status_names_every_key_it_may_carry() -> None:
    assert set(autoscaling_status(2, None, None)) == set(AUTOSCALING_STATUS_KEYS)
    assert set(autoscaling_status(2, _rates(2000.0), None)) == set(AUTOSCALING_STATUS_KEYS)


def test_no_recommendation_is_taken_while_new_executors_wait_to_be_named_by_the_driver() -> None:
    # Scaled out to 3: the third executor is registered, but the driver's runtime state does not name
    # it yet, so it holds no copy: the move it is for has not begun (bench/autoscale.py saw a scale-in
    # decided over two such executors, which never got a task).
    executors = [Executor("1", "p-0"), Executor("2", "p-1"), Executor("3", "p-2")]
    message = AssignmentMessage("wc", Assignment(2, MappingProxyType({
        "0_0": TaskAssignment("1", ("2",)), "0_1": TaskAssignment("2", ("1",))})), tuple(executors[:2]), "t")
    named = {e: ExecutorInventory(e) for e in ("1", "2")}
    runtime = RuntimeState("wc", "t", 2, MappingProxyType({"0_0": {}, "0_1": {}}), executors=MappingProxyType(named))
    assert warming(message, runtime, executors, 3, set()) == "executor(s) 3 not yet named by the driver"
    named["3"] = ExecutorInventory("3")
    runtime = RuntimeState("wc", "t", 2, MappingProxyType({"0_0": {}, "0_1": {}}), executors=MappingProxyType(named))
    assert warming(message, runtime, executors, 3, set()) is None
