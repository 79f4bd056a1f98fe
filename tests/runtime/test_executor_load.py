"""Each executor's load since the driver started (driver/executor_load.py): what its actives
processed and how long they were busy, added up from the batches' and syncs' results (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from eddy_contract.channel import ExecutorLoad
from eddy_contract.tasks import Role
from eddy_runtime.driver.executor_load import ExecutorLoads
from eddy_runtime.protocol.work import ItemResult, ItemStatus

pytestmark = pytest.mark.unit


def active(task: str, executor: str, records: int, busy_s: float,
           status: ItemStatus = ItemStatus.PROCESSED) -> ItemResult:
    return ItemResult(task, executor, Role.ACTIVE, status, records_in=records, busy_s=busy_s)


def test_the_actives_records_and_busy_time_add_up_per_executor_across_batches():
    loads = ExecutorLoads()
    loads.record([active("0_0", "1", 100, 0.25), active("0_1", "1", 50, 0.25), active("0_2", "2", 10, 0.125)],
                 live={"1", "2"})
    loads.record([active("0_0", "1", 30, 0.5)], live={"1", "2"})
    assert loads.of(["1", "2"]) == {"1": ExecutorLoad(180, 1.0), "2": ExecutorLoad(10, 0.125)}
    # the rounds' per-round part adds up beside the busy time
    loads.record([replace(active("0_0", "1", 20, 0.5), busy_per_round_s=0.375)], live={"1", "2"})
    assert loads.of(["1"]) == {"1": ExecutorLoad(200, 1.5, 0.375)}


def test_restores_standbys_and_the_inventory_are_not_load():
    loads = ExecutorLoads()
    loads.record([
        ItemResult("0_0", "1", Role.ACTIVE, ItemStatus.RESTORING, restored=5000),
        ItemResult("0_1", "1", Role.STANDBY, ItemStatus.STANDBY, restored=700, duration_s=1.0),
        ItemResult("", "1", Role.ACTIVE, ItemStatus.PROCESSED, inventory=()),
    ], live={"1"})
    assert loads.of(["1"]) == {"1": ExecutorLoad()}


def test_a_round_that_did_not_commit_counts_its_time_but_not_its_records():
    loads = ExecutorLoads()
    loads.record([active("0_0", "1", 0, 0.25, ItemStatus.ABORTED), active("0_0", "1", 40, 0.25)], live={"1"})
    assert loads.of(["1"]) == {"1": ExecutorLoad(40, 0.5)}


def test_an_executor_that_is_gone_is_forgotten_and_one_new_starts_at_zero():
    loads = ExecutorLoads()
    loads.record([active("0_0", "1", 100, 1.0), active("0_1", "2", 100, 1.0)], live={"1", "2"})
    loads.record([active("0_1", "3", 7, 0.5)], live={"1", "3"})
    assert loads.of(["1", "2", "3"]) == {"1": ExecutorLoad(100, 1.0), "2": ExecutorLoad(), "3": ExecutorLoad(7, 0.5)}


def test_the_counters_say_when_they_started():
    started = datetime(2026, 11, 27, 14, 0, tzinfo=UTC)
    assert ExecutorLoads(started).since == "2026-11-27T14:00:00+00:00"
    assert datetime.fromisoformat(ExecutorLoads().since).tzinfo is not None

