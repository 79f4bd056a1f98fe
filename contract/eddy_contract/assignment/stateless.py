"""Stateless tasks' actives (they have no standbys and nothing to restore): each fills up the
least loaded executor per core, in total first, then within its sub-topology, then among
stateless tasks. Then each goes back to its previous executor wherever that is as balanced: it
moves there when no executor's load leaves the range it was in, or trades places with a stateless
task there. A previous placement on live executors that is spread no wider than the fresh one, in
any of those loads, comes back whole: moves and swaps one at a time cannot undo every rotation."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from eddy_contract.assignment.app_tasks import AppTasks
from eddy_contract.assignment.client_state import ClientState
from eddy_contract.tasks import task_sort_key


def place_stateless(tasks: AppTasks, clients: ClientState, stateful_actives: Mapping[str, str]) -> dict[str, str]:
    """The executor of every stateless task, given where the stateful actives are."""
    loads = _Loads.of_actives(clients.cores, stateful_actives)
    active: dict[str, str] = {}
    for t in tasks.ordered:
        if t in tasks.stateful:
            continue
        p = clients.previous_active(t)
        best = min(clients.live, key=lambda e: (*loads.after_adding(t, e), e != p, e))  # noqa: B023
        active[t] = best
        loads.add(t, best)
    _back_to_previous(active, clients, loads)
    previous = {t: e for t in active if (e := clients.previous_active(t)) is not None and e in clients.cores}
    if len(previous) == len(active) and previous != active:
        kept = _Loads.of_actives(clients.cores, stateful_actives)
        for t, e in previous.items():
            kept.add(t, e)
        if kept.no_wider_than(loads):
            return previous
    return active


@dataclass
class _Loads:
    """Tasks per executor: in total, stateless ones, and stateless ones per sub-topology."""

    cores: Mapping[str, int]
    total: Counter[str] = field(default_factory=Counter)
    stateless: Counter[str] = field(default_factory=Counter)
    per_subtopology: defaultdict[int, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    @classmethod
    def of_actives(cls, cores: Mapping[str, int], stateful_actives: Mapping[str, str]) -> _Loads:
        loads = cls(cores)
        loads.total.update(e for e in stateful_actives.values() if e in cores)
        return loads

    def spreads(self) -> list[float]:
        """Each load's spread per core over the executors: total, stateless, then per sub-topology."""
        counters = [self.total, self.stateless, *(self.per_subtopology[s] for s in sorted(self.per_subtopology))]
        return [max(c[e] / n for e, n in self.cores.items()) - min(c[e] / n for e, n in self.cores.items())
                for c in counters]

    def no_wider_than(self, other: _Loads) -> bool:
        return self.per_subtopology.keys() == other.per_subtopology.keys() and all(
            a <= b for a, b in zip(self.spreads(), other.spreads(), strict=True))

    def of(self, task: str) -> tuple[Counter[str], Counter[str], Counter[str]]:
        return self.total, self.per_subtopology[task_sort_key(task)[0]], self.stateless

    def after_adding(self, task: str, e: str) -> tuple[float, ...]:
        return tuple((c[e] + 1) / self.cores[e] for c in self.of(task))

    def add(self, task: str, e: str, n: int = 1) -> None:
        for c in self.of(task):
            c[e] += n


def _back_to_previous(active: dict[str, str], clients: ClientState, loads: _Loads) -> None:
    """Move stateless tasks back to their previous executor in place, alone or trading places
    with a stateless task there; each step puts more of them where they were, so it ends."""
    def was(t: str, e: str) -> int:
        return int(clients.previous_active(t) == e)

    changed = True
    while changed:
        changed = False
        for t in active:
            x, y = active[t], clients.previous_active(t)
            if y is None or y == x or y not in clients.cores:
                continue
            if all(clients.as_balanced(c, x, y) for c in loads.of(t)):
                loads.add(t, x, -1)
                loads.add(t, y)
                active[t] = y
                changed = True
                continue
            same = task_sort_key(t)[0]
            for u in [u for u in active if active[u] == y]:
                if was(u, x) - was(u, y) + 1 <= 0:
                    continue
                other = task_sort_key(u)[0]
                if other != same and not (clients.as_balanced(loads.per_subtopology[same], x, y)
                                          and clients.as_balanced(loads.per_subtopology[other], y, x)):
                    continue
                loads.per_subtopology[same][x] -= 1
                loads.per_subtopology[same][y] += 1
                loads.per_subtopology[other][y] -= 1
                loads.per_subtopology[other][x] += 1
                active[t], active[u] = y, x
                changed = True
                break
