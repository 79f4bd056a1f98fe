"""Kafka Streams' HighAvailabilityTaskAssignorTest, ported to `assign_app`.

A Kafka client is an executor (its stream threads are the executor's cores); a client's task lag
becomes the offset its volume holds; its previous active tasks become the previous assignment;
Kafka's warmups (standbys beyond numStandbyReplicas) are Eddy's `warmups`; "a probing rebalance
is needed" is "the assignment has warmups". Kafka's rack-aware variants (min-traffic, balance-
subtopology) have no counterpart: Eddy's zones only spread standbys."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import pytest

from eddy_contract.assignor import Assignment, AssignorSettings, Executor, TaskAssignment, assign_app

pytestmark = pytest.mark.unit

END = 10**12
MAX = None  # Long.MAX_VALUE: the client holds nothing for the task
WITHOUT_STANDBYS = AssignorSettings(standby_replicas=0, acceptable_recovery_lag=100, max_warmup_replicas=2)
WITH_STANDBYS = AssignorSettings(standby_replicas=1, acceptable_recovery_lag=100, max_warmup_replicas=2)
NINE = [f"{s}_{p}" for s in range(3) for p in range(3)]


@dataclass
class Client:
    """Kafka's ClientState: previous actives, lags per task (None: holds nothing), capacity."""

    prev_active: Collection[str] = ()
    lags: Mapping[str, int | None] = field(default_factory=dict)
    capacity: int = 1


def caught_up_on(tasks: Collection[str], stateful: Collection[str]) -> Client:
    """getMockClientWithPreviousCaughtUpTasks: previous active on `tasks`, lag 0 there, else MAX."""
    return Client(tasks, {t: 0 if t in tasks else MAX for t in stateful})


def run(clients: Mapping[str, Client], tasks: Collection[str], stateful: Collection[str],
        cfg: AssignorSettings) -> tuple[Assignment, bool]:
    """HighAvailabilityTaskAssignor.assign: the assignment and whether a probing rebalance is needed."""
    executors = [Executor(c, cores=client.capacity) for c, client in clients.items()]
    ends = {t: END if t in stateful else 0 for t in tasks}
    held = {c: {t: END - lag for t, lag in client.lags.items() if lag is not None} for c, client in clients.items()}
    prev = {t: TaskAssignment(c) for c, client in clients.items() for t in client.prev_active}
    previous = Assignment(1, MappingProxyType(prev)) if prev else None
    result = assign_app(executors, ends, held, previous, cfg, stateful)
    return result, any(p.warmups for p in result.tasks.values())


def actives(a: Assignment, client: str) -> set[str]:
    return set(a.active_tasks(client))


def assert_valid(a: Assignment, clients: Collection[str], stateful: Collection[str], standbys: int,
                 warmups: int = 0) -> None:
    """AssignmentTestUtils.assertValidAssignment."""
    spare = warmups
    for t, p in a.tasks.items():
        assert len(set(p.copies)) == len(p.copies) and set(p.copies) <= set(clients)
        expected = min(len(clients), 1 + (standbys if t in stateful else 0))
        assert len(p.standbys) + 1 == expected, (t, p)
        assert len(p.warmups) <= spare, (t, p)
        spare -= len(p.warmups)


def load(a: Assignment, clients: Mapping[str, Client], tasks: Collection[str], stateful_copies: bool) -> list[float]:
    count: Counter[str] = Counter()
    for t, p in a.tasks.items():
        if t in tasks:
            count.update((p.active, *p.standbys, *p.warmups) if stateful_copies else (p.active,))
    return [count[c] / client.capacity for c, client in clients.items()]


def assert_balanced(a: Assignment, clients: Mapping[str, Client], stateful: Collection[str]) -> None:
    """assertBalancedActiveAssignment and assertBalancedStatefulAssignment (per capacity)."""
    for per_core in (load(a, clients, set(a.tasks), False), load(a, clients, stateful, True)):
        assert max(per_core) - min(per_core) <= 1, per_core


def skewed_subtopologies(a: Assignment, clients: Collection[str], threshold: int = 1) -> set[str]:
    """AssignmentTestUtils.analyzeTaskAssignmentBalance: sub-topologies whose active count per
    client differs by more than `threshold`."""
    out = set()
    for s in {t.split("_")[0] for t in a.tasks}:
        count = Counter(p.active for t, p in a.tasks.items() if t.split("_")[0] == s)
        if max(count[c] for c in clients) - min(count[c] for c in clients) > threshold:
            out.add(s)
    return out


def test_should_be_sticky_for_active_and_standby_tasks_while_warming_up() -> None:
    clients = {"1": Client(NINE, {t: 0 for t in NINE}), "2": Client((), {t: 10 for t in NINE}),
               "3": Client((), {t: MAX for t in NINE})}
    a, unstable = run(clients, NINE, NINE, AssignorSettings(1, 11, 2))
    assigned = Counter(e for p in a.tasks.values() for e in p.copies)
    assert assigned == {"1": 9, "2": 9, "3": 2}
    assert unstable


def test_should_skip_warmups_when_acceptable_lag_is_max() -> None:
    clients = {"1": Client(NINE, {t: 0 for t in NINE}), "2": Client((), {t: MAX for t in NINE}),
               "3": Client((), {t: MAX for t in NINE})}
    a, unstable = run(clients, NINE, NINE, AssignorSettings(1, 2**63 - 1, 1))
    assert Counter(e for p in a.tasks.values() for e in p.copies) == {"1": 6, "2": 6, "3": 6}
    assert not unstable


@pytest.mark.parametrize(("tasks", "capacities"), [
    (NINE, (1, 1, 1)),  # ...WhereNumberOfClientsIntegralDivisorOfNumberOfTasks
    (NINE, (3, 3, 3)),  # ...WhereNumberOfThreadsIntegralDivisorOfNumberOfTasks
    (NINE, (1, 1)),  # ...WhereNumberOfClientsNotIntegralDivisorOfNumberOfTasks
    (["0_0", "0_1"], (1, 1, 1)),  # ...WithMoreClientsThanTasks
    (NINE, (9, 9, 9)),  # ...AndStreamThreadsWithEqualStreamThreadsPerClientAsTasks
])
def test_should_assign_active_stateful_tasks_evenly(tasks: list[str], capacities: tuple[int, ...]) -> None:
    clients = {str(i + 1): Client((), {t: 10 for t in tasks}, c) for i, c in enumerate(capacities)}
    a, unstable = run(clients, tasks, tasks, AssignorSettings(0, 0, 1))
    assert not unstable
    assert_valid(a, clients, tasks, 0)
    assert_balanced(a, clients, tasks)
    assert not skewed_subtopologies(a, clients)


def test_should_assign_active_stateful_tasks_evenly_over_unevenly_distributed_stream_threads() -> None:
    tasks = NINE[:6]
    clients = {str(i + 1): Client((), {t: 10 for t in tasks}, c) for i, c in enumerate((1, 2, 3))}
    a, unstable = run(clients, tasks, tasks, AssignorSettings(0, 0, 1))
    assert not unstable
    assert_valid(a, clients, tasks, 0)
    assert_balanced(a, clients, tasks)
    assert [len(actives(a, c)) for c in "123"] == [1, 2, 3]


def test_should_assign_warm_up_tasks_if_stateful_active_tasks_balanced_over_threads_but_not_over_clients() -> None:
    tasks = ["0_0", "0_1", "1_0", "1_1"]
    clients = {"1": Client(tasks, {t: 0 for t in tasks}, 5), "2": Client((), {t: MAX for t in tasks}, 5),
               "3": Client((), {t: MAX for t in tasks}, 5)}
    a, unstable = run(clients, tasks, tasks, AssignorSettings(0, 0, len(tasks) // 3 + 1))
    assert unstable
    assert len(a.warmup_tasks("2")) >= len(tasks) // 3 and len(a.warmup_tasks("3")) >= len(tasks) // 3
    assert_valid(a, clients, tasks, 0, len(tasks) // 3 + 1)


def test_should_evenly_assign_active_stateful_tasks_if_clients_are_warmed_up_to_balance_task_over_clients() -> None:
    tasks = ["0_0", "0_1", "1_0", "1_1"]
    clients = {"1": Client(tasks, {t: 0 for t in tasks}, 5),
               "2": Client((), {t: 0 if t == "0_1" else MAX for t in tasks}, 5),
               "3": Client((), {t: 0 if t == "1_0" else MAX for t in tasks}, 5)}
    a, unstable = run(clients, tasks, tasks, AssignorSettings(0, 0, len(tasks) // 3 + 1))
    assert not unstable
    assert_valid(a, clients, tasks, 0)
    assert_balanced(a, clients, tasks)


def test_should_assign_active_stateful_tasks_evenly_over_stream_threads_but_best_effort_over_clients() -> None:
    clients = {"1": Client((), {t: 10 for t in NINE}, 6), "2": Client((), {t: 10 for t in NINE}, 3)}
    a, unstable = run(clients, NINE, NINE, AssignorSettings(0, 0, 1))
    assert not unstable
    assert_valid(a, clients, NINE, 0)
    assert_balanced(a, clients, NINE)
    assert (len(actives(a, "1")), len(actives(a, "2"))) == (6, 3)


def test_should_compute_new_assignment_if_there_are_unassigned_active_tasks() -> None:
    clients = {"1": Client(["0_0"], {"0_0": 0})}
    a, unstable = run(clients, ["0_0", "0_1"], ["0_0"], WITHOUT_STANDBYS)
    assert not unstable
    assert actives(a, "1") == {"0_0", "0_1"} and not a.standby_tasks("1")


def test_should_compute_new_assignment_if_there_are_unassigned_standby_tasks() -> None:
    clients = {"1": Client(["0_0"], {"0_0": 0}), "2": Client((), {"0_0": 0})}
    a, unstable = run(clients, ["0_0"], ["0_0"], WITH_STANDBYS)
    assert not unstable
    assert a.standby_tasks("2") == ("0_0",)


def test_should_compute_new_assignment_if_active_tasks_was_not_on_caught_up_client() -> None:
    clients = {"1": Client(["0_0"], {"0_0": 500}), "2": Client(["0_1"], {"0_0": 0})}
    a, unstable = run(clients, ["0_0", "0_1"], ["0_0"], WITHOUT_STANDBYS)
    assert actives(a, "1") == {"0_1"} and actives(a, "2") == {"0_0"}
    # Kafka warms 0_0 up on client 1 ("although this isn't an optimal convergence"); Eddy's fixed
    # point keeps 0_0 on caught-up client 2, where it is balanced already: nothing to warm up
    assert not unstable


def test_should_assign_to_most_caught_up_if_active_tasks_was_not_on_caught_up_client() -> None:
    clients = {"1": Client((), {"0_0": MAX}), "2": Client((), {"0_0": 1000}), "3": Client((), {"0_0": 500})}
    a, unstable = run(clients, ["0_0"], ["0_0"], WITH_STANDBYS)
    assert unstable
    assert a.tasks["0_0"].active == "3"
    assert_valid(a, clients, ["0_0"], 1, 1)


def test_should_assign_standbys_for_stateful_tasks() -> None:
    stateful = ["0_0", "0_1"]
    clients = {"1": caught_up_on(["0_0"], stateful), "2": caught_up_on(["0_1"], stateful)}
    a, unstable = run(clients, stateful, stateful, WITH_STANDBYS)
    assert (actives(a, "1"), actives(a, "2")) == ({"0_0"}, {"0_1"})
    assert (a.standby_tasks("1"), a.standby_tasks("2")) == (("0_1",), ("0_0",))
    assert not unstable


def test_should_not_assign_standbys_for_stateless_tasks() -> None:
    clients = {"1": Client(), "2": Client()}
    a, unstable = run(clients, ["0_0", "0_1"], [], WITH_STANDBYS)
    assert len(actives(a, "1")) == len(actives(a, "2")) == 1
    assert all(not p.standbys and not p.warmups for p in a.tasks.values())
    assert not unstable


@pytest.mark.parametrize(("tasks", "cfg", "standbys_on_2"), [
    (["0_0", "0_1"], WITHOUT_STANDBYS, 0),  # shouldAssignWarmupReplicasEvenIfNoStandbyReplicasConfigured
    ([f"0_{p}" for p in range(4)], AssignorSettings(0, 100, 1), 0),  # shouldNotAssignMoreThanMaxWarmupReplicas
    ([f"0_{p}" for p in range(4)], AssignorSettings(1, 100, 1), 4),  # shouldNotAssignWarmupAndStandbyToTheSameClient
])
def test_a_caught_up_client_keeps_its_actives_while_a_new_one_warms_up(
    tasks: list[str], cfg: AssignorSettings, standbys_on_2: int
) -> None:
    clients = {"1": caught_up_on(tasks, tasks), "2": caught_up_on([], tasks)}
    a, unstable = run(clients, tasks, tasks, cfg)
    assert actives(a, "1") == set(tasks) and not a.standby_tasks("1") and not actives(a, "2")
    assert len(a.standby_tasks("2")) == standbys_on_2
    # a standby on client 2 already catches up: no warmup beside it
    assert len(a.warmup_tasks("2")) == (1 if standbys_on_2 == 0 else 0)
    assert unstable == (standbys_on_2 == 0)


def test_should_not_assign_any_standbys_with_insufficient_capacity() -> None:
    stateful = ["0_0", "0_1"]
    a, unstable = run({"1": caught_up_on(stateful, stateful)}, stateful, stateful, WITH_STANDBYS)
    assert actives(a, "1") == set(stateful) and not a.standby_tasks("1")
    assert not unstable


def test_should_assign_active_tasks_to_not_caught_up_client_if_none_exist() -> None:
    stateful = ["0_0", "0_1"]
    a, unstable = run({"1": caught_up_on([], stateful)}, stateful, stateful, WITH_STANDBYS)
    assert actives(a, "1") == set(stateful) and not a.standby_tasks("1")
    assert not unstable


def test_should_not_assign_more_than_max_warmup_replicas_with_standbys() -> None:
    stateful = [f"0_{p}" for p in range(4)]
    clients = {"1": caught_up_on(stateful, stateful), "2": caught_up_on([], stateful), "3": caught_up_on([], stateful)}
    a, unstable = run(clients, stateful, stateful, WITH_STANDBYS)
    assert_valid(a, clients, stateful, 1, 2)
    # Kafka's probing rebalance: moves are under way. In Eddy a standby on a move's destination
    # doubles as its warmup, so the moves show as standbys restoring on clients 2 and 3
    assert actives(a, "1") == set(stateful)
    assert {e for p in a.tasks.values() for e in (*p.standbys, *p.warmups)} == {"2", "3"}


def test_should_distribute_stateless_tasks_to_balance_total_task_load() -> None:
    stateful, stateless = [f"0_{p}" for p in range(4)], ["1_0", "1_1", "1_2"]
    clients = {"1": caught_up_on(stateful, stateful), "2": caught_up_on([], stateful)}
    a, unstable = run(clients, stateful + stateless, stateful, WITH_STANDBYS)
    assert_valid(a, clients, stateful, 1, 2)
    assert_balanced(a, clients, stateful)
    # only client 1 is caught up on the stateful tasks, so client 2 gets every stateless one
    assert skewed_subtopologies(a, clients)
    assert actives(a, "2") == set(stateless)
    # the moves are under way as standbys restoring on client 2 (they double as warmups)
    assert set(a.standby_tasks("2")) == set(stateful)


def test_should_distribute_stateful_active_tasks_to_all_clients() -> None:
    tasks = [*(f"0_{p}" for p in range(4)), *(f"1_{p}" for p in range(4)), "2_0"]
    clients = {str(i + 1): Client((), {t: 0 for t in tasks}, c) for i, c in enumerate((100, 50, 1))}
    a, unstable = run(clients, tasks, tasks, WITH_STANDBYS)
    assert all(actives(a, c) for c in clients)
    assert not unstable


def test_should_return_false_if_previous_assignment_is_reused() -> None:
    tasks = [f"0_{p}" for p in range(4)]
    clients = {"1": caught_up_on(["0_0", "0_2"], tasks), "2": caught_up_on(["0_1", "0_3"], tasks)}
    a, unstable = run(clients, tasks, tasks, WITHOUT_STANDBYS)
    assert not unstable
    assert actives(a, "1") == {"0_0", "0_2"} and actives(a, "2") == {"0_1", "0_3"}


def test_should_return_false_if_no_warmup_tasks_are_assigned() -> None:
    tasks = [f"0_{p}" for p in range(4)]
    a, unstable = run({"1": Client(), "2": Client()}, tasks, [], WITHOUT_STANDBYS)
    assert not unstable
    assert all(not p.standbys for p in a.tasks.values())


def test_should_return_true_if_warmup_tasks_are_assigned() -> None:
    tasks = ["0_0", "0_1"]
    a, unstable = run({"1": caught_up_on(tasks, tasks), "2": caught_up_on([], tasks)}, tasks, tasks, WITHOUT_STANDBYS)
    assert unstable
    assert len(a.warmup_tasks("2")) == 1


@pytest.mark.parametrize("capacities", [(3, 3, 3), (2, 2, 2), (1, 2, 3)])
def test_should_distribute_stateless_tasks_evenly_with_no_stateful_tasks(capacities: tuple[int, ...]) -> None:
    # ...WithEqualStreamThreadsPerClientAsTasks, ...WithLessStreamThreadsPerClientAsTasks,
    # ...WithUnevenlyDistributedStreamThreads, ...AndNoStatefulTasks
    tasks = [*(f"0_{p}" for p in range(4)), *(f"1_{p}" for p in range(3))]
    clients = {str(i + 1): Client((), {}, c) for i, c in enumerate(capacities)}
    a, unstable = run(clients, tasks, [], WITHOUT_STANDBYS)
    assert not unstable
    assert_valid(a, clients, [], 0)
    assert_balanced(a, clients, [])


def test_should_distribute_stateless_tasks_evenly_with_previous_assignment_and_no_stateful_tasks() -> None:
    tasks = [*(f"0_{p}" for p in range(4)), *(f"1_{p}" for p in range(3))]
    clients = {"1": Client(tasks, {}, 3), "2": Client((), {}, 3), "3": Client((), {}, 3)}
    a, unstable = run(clients, tasks, [], WITHOUT_STANDBYS)
    assert not unstable
    assert_balanced(a, clients, [])
