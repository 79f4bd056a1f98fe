"""The orchestrator's pure part: which executors of the last published assignment are lost, why,
and which actives fail over with them."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from eddy_contract.assignor import Assignment, Executor, TaskAssignment
from eddy_contract.channel import AssignmentMessage
from eddy_operator.orchestrator import LostExecutor, lost_executors
from eddy_operator.pods import LossReason, PodInfo

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
