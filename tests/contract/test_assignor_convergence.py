"""Kafka Streams' TaskAssignorConvergenceTest and AssignmentTestUtils, ported to `assign_app`.

A harness plays rebalances: after each round every copy of the assignment (active, standby,
warmup) has caught up and executors hold nothing else, as in Kafka's harness. The rounds
that change the assignment must stay within Kafka's bounds (Kafka counts rounds until no
probing rebalance is pending; here until the next round gives the same assignment and
generation back, which is stricter), and the settled assignment must be valid and balanced."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from eddy_contract.assignor import Assignment, AssignorSettings, Executor, assign_app

pytestmark = pytest.mark.unit

END_OFFSET = 150_000


@dataclass
class Harness:
    """Kafka's Harness: stateless tasks on the first sub-topologies, stateful ones after them,
    `partitions()` tasks per sub-topology; clients are executors with one core."""

    stateless: list[str]
    stateful: list[str]
    clients: list[str]
    held: dict[str, dict[str, int]] = field(default_factory=dict)
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)
    assignment: Assignment | None = None
    history: list[str] = field(default_factory=list)
    next_id: int = 0

    @classmethod
    def cluster(cls, stateless: int, stateful: int, clients: int, partitions: object) -> Harness:
        tasks: list[list[str]] = [[], []]
        subtopology = 0
        for kind, count in enumerate((stateless, stateful)):
            while count > 0:
                n = min(count, partitions())  # type: ignore[operator]
                tasks[kind] += [f"{subtopology}_{p}" for p in range(n)]
                count -= n
                subtopology += 1
        h = cls(tasks[0], tasks[1], [])
        for _ in range(clients):
            h.add_client()
        return h

    def add_client(self) -> None:
        self.clients.append(str(self.next_id))
        self.held[str(self.next_id)] = {}
        self.history.append(f"add {self.next_id}")
        self.next_id += 1

    def drop_client(self, client: str) -> None:
        self.clients.remove(client)
        self.dropped[client] = self.held.pop(client)
        self.history.append(f"drop {client}")

    def resurrect(self, client: str) -> None:
        self.clients.append(client)
        self.held[client] = self.dropped.pop(client)
        self.history.append(f"resurrect {client}")

    @property
    def ends(self) -> dict[str, int]:
        return {**{t: 0 for t in self.stateless}, **{t: END_OFFSET for t in self.stateful}}

    def rebalance(self, cfg: AssignorSettings) -> bool:
        """One round; True if it changed the assignment (a new generation)."""
        executors = [Executor(c) for c in self.clients]
        before = self.assignment
        self.assignment = assign_app(executors, self.ends, self.held, before, cfg, self.stateful)
        self.history.append(f"gen {self.assignment.generation}: {dict(self.assignment.tasks)}")
        # prepareForNextRebalance: each client holds exactly its copies, caught up
        for c in self.clients:
            self.held[c] = {t: END_OFFSET for t, p in self.assignment.tasks.items()
                            if t in self.stateful and c in p.copies}
        return self.assignment is not before

    def converge(self, cfg: AssignorSettings, rounds: int) -> None:
        """Kafka's testForConvergence, stricter: within `rounds` rounds that change something the
        assignment reaches a fixed point (one more round gives it back, same generation)."""
        changes = 0
        while self.rebalance(cfg):
            changes += 1
            assert changes <= rounds, f"no fixed point in {rounds} rounds:\n" + "\n".join(self.history)


def assert_valid(h: Harness, standbys: int) -> None:
    """AssignmentTestUtils.assertValidAssignment (no warmups left)."""
    assert h.assignment is not None
    assert set(h.assignment.tasks) == set(h.stateless) | set(h.stateful)
    for t, p in h.assignment.tasks.items():
        expected = min(len(h.clients), 1 + (standbys if t in h.stateful else 0))
        assert len(set(p.copies)) == len(p.copies) == expected, (t, p)
        assert set(p.copies) <= set(h.clients)


def assert_balanced(h: Harness) -> None:
    """assertBalancedActiveAssignment, assertBalancedStatefulAssignment and a task skew of at
    most 1 per sub-topology (analyzeTaskAssignmentBalance), all with one thread per client."""
    assert h.assignment is not None
    tasks = h.assignment.tasks

    def skew(counts: Counter[str]) -> int:
        return max(counts[c] for c in h.clients) - min(counts[c] for c in h.clients)

    assert skew(Counter(p.active for p in tasks.values())) <= 1
    assert skew(Counter(e for t, p in tasks.items() if t in h.stateful for e in p.copies)) <= 1
    for s in {t.split("_")[0] for t in tasks}:
        assert skew(Counter(p.active for t, p in tasks.items() if t.split("_")[0] == s)) <= 1, s


def test_static_assignment_should_converge_with_the_first_assignment() -> None:
    h = Harness.cluster(1, 1, 1, lambda: 1)
    cfg = AssignorSettings(standby_replicas=0, acceptable_recovery_lag=100, max_warmup_replicas=2)
    h.converge(cfg, 1)
    assert_valid(h, 0)
    assert_balanced(h)


@pytest.mark.parametrize(("stateless", "stateful", "clients", "change", "extra"), [
    # assignmentShouldConvergeAfterAddingNode: each task moves at most once, maxWarmupReplicas at a time
    (7, 11, 1, "add", 1),
    # droppingNodesShouldConverge: one extra round, as in Kafka
    (11, 13, 7, "drop", 2),
])
def test_assignment_should_converge_after_adding_or_dropping_a_node(
    stateless: int, stateful: int, clients: int, change: str, extra: int
) -> None:
    warmups = 2
    h = Harness.cluster(stateless, stateful, clients, lambda: 5)
    cfg = AssignorSettings(standby_replicas=0, acceptable_recovery_lag=100, max_warmup_replicas=warmups)
    h.converge(cfg, 1)
    if change == "add":
        h.add_client()
    else:
        h.drop_client(h.clients[0])
    h.converge(cfg, stateful // warmups + extra)
    assert_valid(h, 0)
    assert_balanced(h)


@given(st.integers(0, 2**63 - 1))
@example(32546087)  # every standby of the busiest executor was of a task the idlest one held
def test_random_cluster_perturbations_should_converge(seed: int) -> None:
    """runRandomizedScenario: random sizes, then random drops and (re)additions of clients."""
    prng = random.Random(seed)
    size = prng.randrange(10) + 1
    stateless, stateful = prng.randrange(10) + 1, prng.randrange(10) + 1
    warmups = prng.randrange(stateful) + 1
    standbys = prng.randrange(size + 1)
    h = Harness.cluster(stateless, stateful, size, lambda: prng.randrange(10) + 1)
    cfg = AssignorSettings(standby_replicas=standbys, acceptable_recovery_lag=100, max_warmup_replicas=warmups)
    h.converge(cfg, 1)
    assert_valid(h, standbys)
    assert_balanced(h)
    for _ in range(prng.randrange(10) + 1):
        if prng.randrange(2) == 0:
            for _ in range(min(prng.randrange(size), len(h.clients))):
                h.drop_client(prng.choice(h.clients))
        else:
            for _ in range(prng.randrange(size)):
                if prng.random() < 0.5 or not h.dropped:
                    h.add_client()
                else:
                    h.resurrect(prng.choice(sorted(h.dropped)))
        if h.clients:
            h.converge(cfg, 2 * (stateful + stateful * standbys))
            assert_valid(h, standbys)
            assert_balanced(h)


def test_replacing_every_client_converges_from_a_previous_assignment_naming_only_dropped_ones() -> None:
    h = Harness.cluster(2, 4, 2, lambda: 2)
    cfg = AssignorSettings(standby_replicas=1, acceptable_recovery_lag=100, max_warmup_replicas=1)
    h.converge(cfg, 1 + 4)
    for c in list(h.clients):
        h.drop_client(c)
    h.add_client()
    h.add_client()
    h.converge(cfg, 2 * (4 + 4))
    assert_valid(h, 1)
    assert_balanced(h)
