"""What an upgrade's state reset does to Kafka and to a runner, without Kafka (driver/upgrade_gate.py's
`reset_plan`; the runner's side: protocol/work.py's `StateReset` over a push, a pause of the reset's
tasks, the reset stores dropped from a volume)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from eddy_contract.tasks import Role
from eddy_contract.topology_compare import compare
from eddy_contract.upgrade import ResetOffsets, UpgradeMode, decide
from eddy_runtime.driver.upgrade_gate import reset_plan
from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.describe import describe
from eddy_runtime.dsl.pipeline import Topology
from eddy_runtime.dsl.subtopology import CompiledApp
from eddy_runtime.executor.continuous_assignment import ContinuousAssignment
from eddy_runtime.executor.task_manager import TaskManager
from eddy_runtime.protocol.work import ContinuousWork, StateReset
from eddy_runtime.protocol.work_push import decode_work, encode_work
from eddy_runtime.state import StateDirectory
from tests.runtime.upgrade_pipelines import counts_v1, counts_v2

pytestmark = pytest.mark.unit


def compiled(build: Callable[..., None]) -> CompiledApp:
    topology = Topology()
    build(topology, "lines", "counts-out")
    return compile_topology(topology, "app", {"lines": 4})


def plan_of(mode: UpgradeMode, reset_offsets: ResetOffsets = ResetOffsets.EARLIEST):
    new = compiled(counts_v2)
    proposed = describe(new)
    decision = decide(compare(describe(compiled(counts_v1)), proposed), mode, proposed, reset_offsets)
    return decision, reset_plan(decision, new)


def test_a_store_rebuilt_from_the_earliest_input_skips_the_repartition_records_written_before():
    decision, plan = plan_of(UpgradeMode.RESET_CHANGED_STATE)
    assert decision.allowed and decision.reset_stores == ("counts",)
    assert plan.changelogs == ("app-counts-changelog",)
    # the input is read again from the beginning, so every word comes again through the repartition topic
    assert dict(plan.positions) == {"lines": ResetOffsets.EARLIEST, "app-words-repartition": ResetOffsets.LATEST}
    assert plan.tasks == ("1_0", "1_1", "1_2", "1_3")


def test_a_store_reset_from_the_latest_input_moves_what_the_decision_moves():
    decision, plan = plan_of(UpgradeMode.RESET_CHANGED_STATE, ResetOffsets.LATEST)
    assert dict(plan.positions) == dict(decision.input_positions) == {"app-words-repartition": ResetOffsets.LATEST}


def test_stateless_empties_every_store_and_moves_no_position():
    _, plan = plan_of(UpgradeMode.STATELESS)
    assert plan.changelogs == ("app-counts-changelog",) and dict(plan.positions) == {}


def test_a_push_carries_the_state_reset_and_an_old_push_reads_as_none():
    reset = StateReset("r1", ("counts",), ("1_0", "1_1"))
    work = ContinuousWork(3, (("1_0", Role.ACTIVE),), 0.2, 1, "0", reset)
    assert decode_work(encode_work("app", work)) == ("app", work)
    assert decode_work(encode_work("app", ContinuousWork(3, (), 0.2)))[1].reset is None


def test_no_step_runs_a_paused_task_and_the_pause_waits_for_the_step_under_way():
    assignment = ContinuousAssignment(on_new_generation=lambda: None)
    work = ContinuousWork(1, (("1_0", Role.ACTIVE), ("1_1", Role.ACTIVE)), 0.2)
    step_ends = threading.Event()

    def step() -> None:
        with assignment.committing(work, ["1_0"], Role.ACTIVE) as c:
            c.clean = True
            step_ends.wait(5)

    runner = threading.Thread(target=step)
    runner.start()
    time.sleep(0.1)
    threading.Timer(0.3, step_ends.set).start()
    started = time.monotonic()
    with assignment.paused({"1_0"}, timeout_s=5):
        assert time.monotonic() - started >= 0.25  # waited for the step holding 1_0
        with assignment.committing(work, ["1_0", "1_1"], Role.ACTIVE) as c:
            assert c.allowed == ["1_1"]
            c.clean = True
    runner.join()
    with assignment.committing(work, ["1_0"], Role.ACTIVE) as c:
        assert c.allowed == ["1_0"]
        c.clean = True


def test_a_reset_drops_its_stores_from_every_task_directory_and_keeps_the_others(tmp_path):
    volume = StateDirectory(tmp_path)
    for task, stores in {"1_0": ["counts", "other"], "1_1": ["counts"], "2_0": ["other"]}.items():
        for store in stores:
            volume.task_directory("app", task).store_path(store).mkdir(parents=True)
    wiped = TaskManager("0", None).wipe_stores(str(tmp_path), "app", {"counts"})
    assert wiped == ["1_0", "1_1"]
    assert {t: volume.task_directory("app", t).stores() for t in ("1_0", "1_1", "2_0")} == {
        "1_0": ["other"], "1_1": [], "2_0": ["other"]}
