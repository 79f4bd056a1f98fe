"""Rule 1, stateful actives: where each belongs once every copy has caught up (Kafka Streams'
HighAvailabilityTaskAssignor). Balanced per core in total and per sub-topology (a round robin over
cores), as sticky to the previous actives as that allows, the rest on their freshest copies;
then `caught_up_swaps` trades targets between tasks to put more of them on caught-up copies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from eddy_contract.assignment.app_tasks import AppTasks, TaskGroup
from eddy_contract.assignment.caught_up_swaps import swap_towards_caught_up
from eddy_contract.assignment.client_state import ClientState


def target_actives(tasks: AppTasks, clients: ClientState) -> dict[str, str]:
    """The target executor of every stateful task."""
    quotas = _quotas(tasks, clients)
    target: dict[str, str] = {}
    for g, members in tasks.groups.items():
        left = dict(quotas[g])
        rest = []
        for t in members:
            p = clients.sticky(t)
            if p is not None and left[p] > 0:
                target[t] = p
                left[p] -= 1
            else:
                rest.append(t)
        for t in rest:
            e = min((e for e in clients.live if left[e] > 0), key=clients.freshest(t))
            target[t] = e
            left[e] -= 1
    swap_towards_caught_up(target, tasks, clients)
    return target


class _Core(NamedTuple):
    """One core of an executor: actives are dealt out core by core."""

    executor: str
    number: int


def _quotas(tasks: AppTasks, clients: ClientState) -> Mapping[TaskGroup, Mapping[str, int]]:
    """How many of each group's actives each executor gets: the group's tasks dealt over every
    core of every executor, the least loaded cores first, those of sticky executors first."""
    cores = [_Core(e, i) for e in clients.live for i in range(clients.cores[e])]
    total = {c: 0 for c in cores}
    out: dict[TaskGroup, dict[str, int]] = {}
    for g, members in tasks.groups.items():
        stick = {e: 0 for e in clients.live}
        for t in members:
            if (p := clients.sticky(t)) is not None:
                stick[p] += 1
        base, extra = divmod(len(members), len(cores))
        # an executor's cores fill up in step with the others' (Kafka's least loaded client)
        order = sorted(cores, key=lambda c: (total[c], c.number / clients.cores[c.executor], -stick[c.executor], c))
        quota = {e: 0 for e in clients.live}
        for n, c in enumerate(order):
            got = base + (1 if n < extra else 0)
            total[c] += got
            quota[c.executor] += got
        out[g] = quota
    return out
