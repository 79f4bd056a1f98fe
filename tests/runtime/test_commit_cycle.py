"""When a runner's rounds start under exactly-once: a cycle per commit interval, and follow-up
rounds down the topology within it (commit_cycle.CommitCycle; pure)."""

from __future__ import annotations

import pytest

from eddy_runtime.executor.commit_cycle import CommitCycle

pytestmark = pytest.mark.unit

WORDS = [("words", 0)]  # a source partition: the 0_x tasks read it
REPARTITION = [("app-words-repartition", 0)]  # what the 0_x tasks write and the 1_x tasks read
COUNTS = [("app-counts-repartition", 0)]  # what the 1_x tasks write and the 2_x tasks read


def test_a_cycle_starts_a_commit_interval_after_the_last_one_started():
    cycle = CommitCycle()
    assert cycle.due("0_0", WORDS) == 0.0  # the first records go at once
    cycle.started(["0_0"], now=10.0, interval_s=0.1)
    assert cycle.due("0_0", WORDS) == pytest.approx(10.1)
    assert cycle.due("1_0", REPARTITION) == pytest.approx(10.1)  # nothing fetched of its input yet
    cycle.started(["0_0", "1_0"], now=10.13, interval_s=0.1)
    assert cycle.due("0_0", WORDS) == pytest.approx(10.23)


def test_the_readers_of_what_a_round_wrote_follow_up_once_it_is_fetched_and_so_on_down_the_topology():
    cycle = CommitCycle()
    cycle.started(["0_0"], now=10.0, interval_s=0.1)
    cycle.output_fetched(REPARTITION)
    assert cycle.due("1_0", REPARTITION) == 0.0
    assert cycle.due("0_0", WORDS) == pytest.approx(10.1)  # its input is not what was written
    assert cycle.due("2_0", COUNTS) == pytest.approx(10.1)
    cycle.started(["1_0"], now=10.03, interval_s=0.1)  # the follow-up: same cycle
    assert cycle.due("1_0", REPARTITION) == pytest.approx(10.1)
    assert cycle.due("2_0", COUNTS) == pytest.approx(10.1)  # not until what 1_0 wrote is fetched
    cycle.output_fetched(COUNTS)
    assert cycle.due("2_0", COUNTS) == 0.0
    cycle.started(["2_0"], now=10.05, interval_s=0.1)
    cycle.output_fetched([])  # the last level writes only to topics the runner does not read
    assert [cycle.due(t, tps) for t, tps in [("0_0", WORDS), ("1_0", REPARTITION), ("2_0", COUNTS)]] == [
        pytest.approx(10.1)] * 3


def test_a_task_follows_up_at_most_once_per_cycle_even_in_a_loop_of_the_topology():
    cycle = CommitCycle()
    cycle.started(["0_0", "1_0"], now=5.0, interval_s=0.1)  # both had records when the cycle started
    cycle.output_fetched(REPARTITION)
    assert cycle.due("1_0", REPARTITION) == 0.0  # it was in the cycle's first round: it may follow up
    cycle.started(["1_0"], now=5.02, interval_s=0.1)
    cycle.output_fetched(REPARTITION)  # 1_0 wrote back to the topic it reads
    assert cycle.due("1_0", REPARTITION) == pytest.approx(5.1)
    cycle.started(["0_0"], now=5.1, interval_s=0.1)  # the next cycle: everyone may follow up again
    cycle.output_fetched(REPARTITION)
    assert cycle.due("1_0", REPARTITION) == 0.0


def test_a_task_that_joins_mid_cycle_takes_its_first_round_at_once_then_keeps_the_cadence():
    cycle = CommitCycle()
    cycle.started(["0_0"], now=10.0, interval_s=0.1)
    cycle.joined("0_1")  # taken over from another runner: its records waited through the hand-over
    assert cycle.due("0_1", [("words", 1)]) == 0.0
    assert cycle.due("0_0", WORDS) == pytest.approx(10.1)  # the others keep theirs
    cycle.started(["0_1"], now=10.02, interval_s=0.1)  # a round of its own within the cycle
    assert cycle.due("0_1", [("words", 1)]) == pytest.approx(10.1)
    assert cycle.due("0_0", WORDS) == pytest.approx(10.1)
