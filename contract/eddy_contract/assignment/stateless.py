"""Stateless tasks' actives (they have no standbys and nothing to restore): each fills up the
least loaded executor per core, in total first, then within its sub-topology, then among
stateless tasks; the previous executor only breaks ties."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping

from eddy_contract.assignment.app_tasks import AppTasks
from eddy_contract.assignment.client_state import ClientState
from eddy_contract.tasks import task_sort_key


def place_stateless(tasks: AppTasks, clients: ClientState, stateful_actives: Mapping[str, str]) -> dict[str, str]:
    """The executor of every stateless task, given where the stateful actives are."""
    total = Counter({e: 0 for e in clients.live})
    total.update(stateful_actives.values())
    stateless = Counter({e: 0 for e in clients.live})
    per_subtopology: defaultdict[int, Counter[str]] = defaultdict(Counter)
    active: dict[str, str] = {}
    for t in tasks.ordered:
        if t in tasks.stateful:
            continue
        placed = per_subtopology[task_sort_key(t)[0]]
        p = clients.previous_active(t)

        def load(e: str, placed: Counter[str] = placed, p: str | None = p) -> tuple[float, float, float, bool, str]:
            c = clients.cores[e]
            return ((total[e] + 1) / c, (placed[e] + 1) / c, (stateless[e] + 1) / c, e != p, e)

        best = min(clients.live, key=load)
        active[t] = best
        total[best] += 1
        stateless[best] += 1
        placed[best] += 1
    return active
