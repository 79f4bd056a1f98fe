"""Planning a micro-batch from the assignment and the offsets, and the driver's pure bookkeeping
around it: input lag, the bisection that finds a poison record, what volumes hold, when the app
must stop (pure)."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from eddy_contract.assignor import Assignment, TaskAssignment
from eddy_runtime.driver.batch_plan import continuous_copies, input_ranges, plan_batch, task_lags
from eddy_runtime.driver.outcomes import BatchReport, stop_error
from eddy_runtime.driver.poison import first_failing
from eddy_runtime.driver.runtime_state import Volumes
from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.pipeline import Topology, join_windows
from eddy_runtime.dsl.subtopology import CompiledApp
from eddy_runtime.kafka.partitions import InputRange
from eddy_runtime.protocol.work import ItemResult, WorkItem
from eddy_runtime.state import StoreFigures, StoreInventory, TaskFigures, TaskInventory

pytestmark = pytest.mark.unit

REPARTITION = "wc-words-repartition"


def identity(df):
    return df


def word_count() -> CompiledApp:
    """Sub-topology 0 reads `lines` through a DataFrame step; 1 counts per word (stateful)."""
    t = Topology()
    t.stream("lines").transform(identity).group_by("word", name="words").count(name="counts").to("counts-out")
    return compile_topology(t, "wc", {"lines": 2})


def assignment() -> Assignment:
    return Assignment(3, MappingProxyType({
        "0_0": TaskAssignment("1"), "0_1": TaskAssignment("2"),
        "1_0": TaskAssignment("1", ("2",)), "1_1": TaskAssignment("2", (), ("1",)),
    }))


def offsets(lines: tuple[int, int], repartition: tuple[int, int]) -> dict[tuple[str, int], int]:
    return {("lines", 0): lines[0], ("lines", 1): lines[1], (REPARTITION, 0): repartition[0],
            (REPARTITION, 1): repartition[1]}


def plan(*, fresh: bool, committed=None, ends=None, held=None, restoring=None, poison=None, cap=1000,
         changelog_ends=None):
    return plan_batch(word_count(), assignment(), {"1", "2"},
                      committed=committed or offsets((0, 0), (0, 0)), ends=ends or offsets((0, 0), (0, 0)),
                      changelog_ends=changelog_ends or {}, held_offsets=held or {}, restoring=restoring or {},
                      poison=poison or {}, max_records=cap, fresh=fresh)


def test_right_after_an_assignment_every_copy_gets_an_item_and_each_executor_learns_what_it_holds():
    p = plan(fresh=True)
    assert set(p.dataframe_items) == {"0_0", "0_1"}
    assert p.dataframe_items["0_0"] == WorkItem("0_0", "active", (InputRange("lines", 0, 0, 0),))
    assert [(i.task, i.role) for i in p.per_executor["1"]] == [("1_0", "active"), ("1_1", "standby")]
    assert [(i.task, i.role) for i in p.per_executor["2"]] == [("1_0", "standby"), ("1_1", "active")]
    assert p.held == {"1": [("0_0", "active"), ("1_0", "active"), ("1_1", "standby")],
                      "2": [("0_1", "active"), ("1_0", "standby"), ("1_1", "active")]}


def test_later_batches_plan_only_actives_with_input_restores_under_way_and_standbys_behind():
    p = plan(fresh=False, committed=offsets((5, 7), (0, 0)), ends=offsets((9, 7), (0, 0)),
             restoring={"1_1": "2"}, changelog_ends={"1_0": 50, "1_1": 50}, held={"2": {"1_0": 50}, "1": {"1_1": 40}})
    assert list(p.dataframe_items) == ["0_0"]
    assert p.dataframe_items["0_0"].ranges == (InputRange("lines", 0, 5, 9),)
    # 1_0 has no input; 1_1 is restoring on executor 2: a restore chunk, no input read.
    assert [(i.task, i.role, i.restore_only) for i in p.per_executor["2"]] == [("1_1", "active", True)]
    # Executor 2's standby of 1_0 is caught up; executor 1's warmup of 1_1 is 10 offsets behind.
    assert [(i.task, i.role) for i in p.per_executor["1"]] == [("1_1", "standby")]


def test_an_executor_that_is_not_live_gets_nothing_planned():
    p = plan_batch(word_count(), assignment(), {"1"}, committed=offsets((0, 0), (0, 0)),
                   ends=offsets((3, 3), (0, 0)), changelog_ends={}, held_offsets={}, restoring={}, poison={},
                   max_records=10, fresh=True)
    assert set(p.per_executor) == {"1"} and set(p.dataframe_items) == {"0_0"}


def test_an_input_range_is_capped_and_carries_the_poison_records_inside_it():
    p = plan(fresh=False, committed=offsets((100, 0), (0, 0)), ends=offsets((5000, 0), (0, 0)), cap=1000,
             poison={("lines", 0): {99: "old", 150: "bad", 1100: "later"}})
    item = p.dataframe_items["0_0"]
    assert item.ranges == (InputRange("lines", 0, 100, 1100),)
    assert item.poison == ((150, "bad"),)


def test_input_ranges_never_end_before_they_start_and_lags_count_uncommitted_records():
    compiled = word_count()
    sub = compiled.subtopologies[0]
    # The committed position can be past a last stable offset read a moment earlier.
    assert input_ranges(sub, "0_1", offsets((0, 12), (0, 0)), offsets((0, 10), (0, 0)), 100) == (
        InputRange("lines", 1, 12, 12),)
    assert task_lags(compiled, offsets((5, 12), (1, 0)), offsets((9, 10), (4, 0))) == {
        "0_0": 4, "0_1": 0, "1_0": 3, "1_1": 0}



def test_a_joins_lag_counts_both_of_its_inputs():
    # An order-only or payment-only backlog both leave the join's task behind.
    t = Topology()
    t.stream("orders").join(t.stream("payments"), lambda o, p: o, windows=join_windows(10)).to("paid")
    compiled = compile_topology(t, "j", {"orders": 1, "payments": 1})
    committed = {("orders", 0): 5, ("payments", 0): 7}
    assert task_lags(compiled, committed, {("orders", 0): 5, ("payments", 0): 9}) == {"0_0": 2}
    assert task_lags(compiled, committed, {("orders", 0): 8, ("payments", 0): 9}) == {"0_0": 5}


@pytest.mark.parametrize(("bad", "expected"), [({7}, 7), ({3, 12}, 3), ({0}, 0), ({19}, 19)])
def test_bisection_finds_the_first_record_that_fails_on_its_own(bad, expected):
    probes: list[tuple[int, int]] = []

    def fails(lo: int, hi: int) -> str | None:
        probes.append((lo, hi))
        hit = sorted(o for o in bad if lo <= o < hi)
        return f"boom at {hit[0]}" if hit else None

    assert first_failing(0, 20, fails) == (expected, f"boom at {expected}")
    assert len(probes) <= 6  # log2(20) halvings and the check of the single record


def test_bisection_reports_nothing_when_only_records_together_fail():
    def fails(lo: int, hi: int) -> str | None:
        return "together" if lo <= 4 and hi >= 6 else None  # records 4 and 5 fail only in one run

    assert first_failing(0, 10, fails) is None


def test_volumes_track_restoring_actives_and_forget_executors_that_left():
    volumes = Volumes()
    volumes.held = {"1": {"1_0": 10}, "3": {"1_0": 8}}
    volumes.record_results([ItemResult("1_0", "1", "active", "restoring"),
                            ItemResult("1_1", "2", "active", "restoring")], live={"1", "2"})
    assert volumes.restoring == {"1_0": "1", "1_1": "2"}
    assert set(volumes.held) == {"1"}
    volumes.record_results([ItemResult("1_0", "1", "active", "processed"),
                            ItemResult("1_1", "2", "standby", "standby")], live={"1", "2"})
    assert volumes.restoring == {"1_1": "2"}


def test_an_inventory_from_checkpoints_never_lowers_what_a_copys_figures_reported():
    def inventory(task: str, offset: int) -> TaskInventory:
        store = StoreInventory("counts", "app-counts-changelog", 1, offset - 1, 0)
        return TaskInventory("app", task, f"/state/app/{task}", (store,), (), None)

    volumes = Volumes()
    volumes.record_inventory("2", [inventory("1_0", 40), inventory("1_1", 50)])
    figures = TaskFigures("app", "1_1", "active", False,
                          (StoreFigures("counts", "app-counts-changelog", 1, 121, 0, 0.0, 0, None, None, 0, 0),))
    volumes.record_results([ItemResult("1_1", "2", "active", "processed", figures=figures)], live={"2"})
    assert volumes.held["2"] == {"1_0": 40, "1_1": 122}
    # The throttled checkpoint of 1_1 still says 50, and 1_0's copy moved on since the last look.
    volumes.record_inventory("2", [inventory("1_0", 45), inventory("1_1", 50)])
    assert volumes.held["2"] == {"1_0": 45, "1_1": 122}
    assert volumes.held_stores["2"]["1_1"] == {"counts": 122}
    # A task no longer on the volume is no longer held there.
    volumes.record_inventory("2", [inventory("1_0", 45)])
    assert volumes.held["2"] == {"1_0": 45}


def test_a_bad_record_under_policy_fail_or_an_error_in_the_users_code_stops_the_app():
    bad = BatchReport(1, "ok", 0.1, 1, [ItemResult("0_0", "1", "active", "bad-record", message="at offset 4")])
    assert str(stop_error(bad, 0, 5)) == "task 0_0: at offset 4 (badRecordPolicy: fail)"
    user = BatchReport(1, "ok", 0.1, 1, [ItemResult("0_1", "2", "active", "failed", message="pipeline error: x")])
    assert str(stop_error(user, 1, 5)) == "task 0_1: pipeline error: x"
    other = BatchReport(1, "ok", 0.1, 1, [ItemResult("0_1", "2", "active", "failed", message="task runner: EOF")])
    assert stop_error(other, 1, 5) is None


def test_failed_batches_stop_the_app_once_max_failed_batches_failed_in_a_row():
    failed = BatchReport(7, "failed", 0.1, 1, error="Job aborted")
    assert stop_error(failed, 4, 5) is None
    assert str(stop_error(failed, 5, 5)) == "5 batches in a row failed; last error: Job aborted"


def test_continuous_sub_topologies_get_no_items_and_dataframe_ones_stay_micro_batches():
    ends = offsets((40, 0), (9, 3))
    p = plan_batch(word_count(), assignment(), {"1", "2"}, committed=offsets((0, 0), (0, 0)), ends=ends,
                   changelog_ends={"1_0": 50, "1_1": 50}, held_offsets={}, restoring={}, poison={},
                   max_records=1000, fresh=True, continuous={1})
    # the DataFrame sub-topology still reads its ranges in a micro-batch
    assert p.dataframe_items["0_0"] == WorkItem("0_0", "active", (InputRange("lines", 0, 0, 40),))
    # the counting sub-topology's copies run on their own: no items, each executor told its share
    assert p.per_executor == {"1": [], "2": []}
    assert p.continuous == {"1": [("1_0", "active"), ("1_1", "standby")], "2": [("1_0", "standby"), ("1_1", "active")]}
    # what the driver pushes to the runners when a generation comes mid-batch, without the offsets
    assert continuous_copies(word_count(), assignment(), {"1", "2"}, {1}) == p.continuous
    assert continuous_copies(word_count(), assignment(), {"2"}, {1}) == {"2": [("1_0", "standby"), ("1_1", "active")]}
    # and each executor still holds both kinds (its runner closes what it no longer holds)
    assert p.held["1"] == [("0_0", "active"), ("1_0", "active"), ("1_1", "standby")]
