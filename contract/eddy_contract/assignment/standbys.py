"""Rule 3, standbys of stateful tasks (Kafka Streams' ClientTagAwareStandbyTaskAssignor, zones as
rack tags): min(standbyReplicas, executors - 1) per task, never two copies on one executor, in a
zone the task's copies do not use yet, else where stateful copies (actives and standbys) stay
balanced per core. A standby that would have to restore gives way to a caught-up copy while one
exists: the hot copy stays and the new place becomes a planned move (a warmup)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from eddy_contract.assignment.app_tasks import AppTasks
from eddy_contract.assignment.client_state import ClientState
from eddy_contract.assignment.standby_balance import balance_standbys
from eddy_contract.assignment.task_movement import PlannedMove
from eddy_contract.tasks import Role


class StandbyPlacement(NamedTuple):
    standbys: dict[str, list[str]]  # task -> its standbys' executors
    moves: list[PlannedMove]  # where a standby belongs but a caught-up copy stands in for it


def place_standbys(
    tasks: AppTasks,
    clients: ClientState,
    active: Mapping[str, str],
    target: Mapping[str, str],
    standby_replicas: int,
) -> StandbyPlacement:
    """The standbys of every stateful task, and the planned moves of those that give way."""
    goal = standby_targets(tasks, clients, active, target, standby_replicas)
    standbys: dict[str, list[str]] = {}
    moves: list[PlannedMove] = []
    for t, wanted in goal.items():
        chosen = list(wanted)
        # who gives way first: executors that held no copy, then warmups under way (they go on
        # warming up), previous standbys last; the same one every round (a fixed point)
        cold = sorted((e for e in wanted if not clients.caught_up(e, t)),
                      key=lambda e: (clients.was_standby(e, t), not clients.was_warmup(e, t), e))  # noqa: B023
        for best in cold:
            i = chosen.index(best)
            others = [active[t], *chosen[:i], *chosen[i + 1:]]
            used = {clients.zone[e] for e in others}
            hot = [e for e in clients.live if e not in others and e not in wanted and clients.caught_up(e, t)
                   and (clients.zone[e] not in used or clients.zone[best] in used)]
            if hot:
                chosen[i] = min(hot, key=clients.freshest(t))
                moves.append(PlannedMove(t, best, Role.STANDBY))
        standbys[t] = chosen
    return StandbyPlacement(standbys, moves)


def standby_targets(
    tasks: AppTasks,
    clients: ClientState,
    active: Mapping[str, str],
    target: Mapping[str, str],
    standby_replicas: int,
) -> dict[str, list[str]]:
    """Where standbys belong once caught up: each on the least loaded executor (per core) in
    a zone the task's copies do not use yet; then single standbys move from an executor whose
    copies are two or more above another's while zones allow (`standby_balance`)."""
    wanted = min(standby_replicas, len(clients.live) - 1)
    stateful = tasks.stateful_in_order()
    load = {e: 0 for e in clients.live}
    for t in stateful:
        load[target[t]] += 1
    goal: dict[str, list[str]] = {t: [] for t in stateful}
    # previous copies keep their place first (warmups that stood in for a standby, then
    # standbys), then the least loaded executors take the rest
    for t in stateful:
        p = clients.previous.get(t)
        seeds = ([e for e in (*p.warmups, *p.standbys) if e in clients.cores and (e != target[t] or e in p.standbys)]
                 if p else [])
        for new_zone_only in (True, False):  # seeds in zones the copies lack go first
            for e in seeds:
                used = {clients.zone[x] for x in (active[t], *goal[t])}
                if new_zone_only and clients.zone[e] in used:
                    continue
                if len(goal[t]) < wanted and _may_take(clients, e, active[t], goal[t]):
                    goal[t].append(e)
                    load[e] += 1
    for t in stateful:
        chosen = goal[t]
        while len(chosen) < wanted:
            used = {clients.zone[e] for e in (active[t], *chosen)}
            free = [e for e in clients.live if e != active[t] and e not in chosen]
            best = min(free, key=lambda e: (  # noqa: B023
                clients.zone[e] in used, load[e] / clients.cores[e], e != target[t],  # noqa: B023
                not clients.caught_up(e, t), clients.lag(e, t), e))  # noqa: B023
            load[best] += 1
            chosen.append(best)
    balance_standbys(clients, active, goal, load, rounds=len(stateful) * wanted * len(clients.live))
    return goal


def _may_take(clients: ClientState, e: str, active: str, chosen: Sequence[str]) -> bool:
    """`e` is live, holds no copy of the task yet and does not give up a zone the copies could use."""
    if e not in clients.cores or e == active or e in chosen:
        return False
    used = {clients.zone[x] for x in (active, *chosen)}
    return clients.zone[e] not in used or all(
        clients.zone[f] in used for f in clients.live if f != active and f not in chosen)
