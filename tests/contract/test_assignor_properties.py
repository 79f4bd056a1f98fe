"""Kafka Streams' promises as properties of `assign_app`: a fixed point, balance per core (in total,
per kind, per sub-topology, of stateful copies), over random executors with cores and zones,
random lags, prior assignments and churn."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy_contract.assignor import Assignment, AssignorSettings, Executor, assign_app
from tests.contract.test_assignor import prior_assignments

pytestmark = pytest.mark.unit

MANY = settings()  # examples: the profile (tests/contract/conftest.py): 400 in CI
Scenario = tuple[list[Executor], dict[str, int], dict[str, dict[str, int]], Assignment | None, AssignorSettings,
                 list[str]]


@st.composite
def apps(draw: st.DrawFn, zones: bool = True, cores: bool = True, caught_up: bool = False) -> Scenario:
    """Executors 1-6 (some with more cores, some in zones), 1-3 sub-topologies of 1-8 tasks, some
    stateless; random volumes; a random previous assignment naming live and dead executors."""
    ids = draw(st.lists(st.sampled_from([str(i) for i in range(1, 10)]), min_size=1, max_size=6, unique=True))
    executors = [Executor(i, f"pod-{i}", draw(st.sampled_from(["a", "b", "c", None])) if zones else None,
                          draw(st.integers(1, 3)) if cores else 1) for i in ids]
    subtopologies = draw(st.integers(1, 3))
    tasks = [f"{s}_{p}" for s in range(subtopologies) for p in range(draw(st.integers(1, 8)))]
    stateless = draw(st.sets(st.integers(0, subtopologies - 1), max_size=subtopologies - 1))
    stateful = [t for t in tasks if int(t.split("_")[0]) not in stateless]
    end = {t: draw(st.sampled_from([100, 1000, draw(st.integers(0, 5000))])) if t in stateful else 0 for t in tasks}
    held: dict[str, dict[str, int]] = {}
    for e in ids:
        holds = tasks if caught_up else draw(st.lists(st.sampled_from(tasks), unique=True))
        held[e] = {t: end[t] if caught_up else draw(st.integers(0, end[t] + 5)) for t in holds}
    previous: Assignment | None = draw(prior_assignments(tasks, ids))
    cfg = AssignorSettings(draw(st.integers(0, 3)), draw(st.sampled_from([0, 10, 100, 10000])), draw(st.integers(0, 3)))
    return executors, end, held, previous, cfg, stateful


def spread(executors: list[Executor], placed: Iterable[str]) -> float:
    """max - min of tasks per core over the executors."""
    count = Counter(placed)
    per_core = [count[e.id] / e.cores for e in executors]
    return float(max(per_core) - min(per_core))


@MANY
@given(apps())
def test_the_result_given_back_as_previous_gives_itself_back(app: Scenario) -> None:
    executors, end, held, previous, cfg, stateful = app
    first = assign_app(executors, end, held, previous, cfg, stateful)
    assert assign_app(executors, end, held, first, cfg, stateful) is first


@MANY
@given(apps())
def test_every_assignment_is_valid(app: Scenario) -> None:
    executors, end, held, previous, cfg, stateful = app
    result = assign_app(*app)
    live = {e.id for e in executors}
    wanted = min(cfg.standby_replicas, len(executors) - 1)
    assert set(result.tasks) == set(end)
    for t, p in result.tasks.items():
        assert set(p.copies) <= live and len(set(p.copies)) == len(p.copies)
        assert len(p.standbys) == (wanted if t in stateful else 0)
        assert not p.warmups or t in stateful
        assert len(p.warmups) <= 1, (t, p)  # Kafka Streams places one extra copy per task
    assert sum(len(p.warmups) for p in result.tasks.values()) <= cfg.max_warmup_replicas


@MANY
@given(apps(zones=False, caught_up=True))
def test_everything_caught_up_everywhere_gives_kafka_streams_balance(app: Scenario) -> None:
    executors, end, held, previous, cfg, stateful = app
    result = assign_app(*app)
    tasks = result.tasks
    assert spread(executors, (p.active for p in tasks.values())) <= 1
    assert spread(executors, (p.active for t, p in tasks.items() if t in stateful)) <= 1
    if len({e.cores for e in executors}) == 1:
        # With cores, stateless tasks fill up the total per core first, as Kafka Streams' least
        # loaded client does; their own spread per core is then not bounded.
        assert spread(executors, (p.active for t, p in tasks.items() if t not in stateful)) <= 1
    for s in {t.split("_")[0] for t in stateful}:
        assert spread(executors, (p.active for t, p in tasks.items() if t.split("_")[0] == s)) <= 1, s
    assert all(not p.warmups for p in tasks.values())  # no copy has to catch up: nothing to warm up


@MANY
@given(apps(zones=False, cores=False, caught_up=True))
def test_everything_caught_up_everywhere_balances_stateful_copies(app: Scenario) -> None:
    # With cores, an executor holds at most one copy of a task, so copies per core cannot always
    # be balanced; Kafka Streams' bound is for equal clients.
    executors, end, held, previous, cfg, stateful = app
    result = assign_app(*app)
    copies = [e for t, p in result.tasks.items() if t in stateful for e in (p.active, *p.standbys)]
    assert spread(executors, copies) <= 1
