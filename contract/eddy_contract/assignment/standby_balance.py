"""Rule 3, last step: even out stateful copies per core by moving single standbys off the most
loaded executors, never onto an executor that holds a copy of the task and never giving up a zone
the task's copies use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from eddy_contract.assignment.client_state import ClientState


class StandbyMove(NamedTuple):
    """The standby of `task` at `position` in its standbys goes to `executor`."""

    task: str
    position: int
    executor: str


def balance_standbys(
    clients: ClientState, active: Mapping[str, str], goal: dict[str, list[str]], load: dict[str, int], rounds: int
) -> None:
    """Move standbys in `goal` (and the copies counted in `load`) in place, at most `rounds` times."""
    for _ in range(rounds):
        moves = _next_moves(clients, active, goal, load)
        if not moves:
            break
        for t, i, dst in moves:
            load[goal[t][i]] -= 1
            load[dst] += 1
            goal[t][i] = dst


def _next_moves(
    clients: ClientState, active: Mapping[str, str], goal: Mapping[str, list[str]], load: Mapping[str, int]
) -> list[StandbyMove]:
    """Standby moves that take one standby off the most loaded executor onto a less loaded one:
    directly if that one may take one of them, else through a third executor that takes one and
    hands another on (its load stays), as when every standby of the loaded executor is of a task
    the less loaded one already holds."""
    def fits(t: str, src: str, dst: str) -> int | None:
        """The index of the standby of `t` on `src` if it may go to `dst`."""
        chosen = goal[t]
        if src not in chosen or dst in chosen or dst == active[t]:
            return None
        others = {clients.zone[e] for e in (active[t], *chosen) if e != src}
        return chosen.index(src) if clients.zone[dst] not in others or clients.zone[src] in others else None

    def over(src: str, dst: str) -> bool:
        return load[src] / clients.cores[src] > (load[dst] + 1) / clients.cores[dst]

    for src in sorted(clients.live, key=lambda e: (-load[e] / clients.cores[e], e)):
        for dst in sorted(clients.live, key=lambda e: (load[e] / clients.cores[e], e)):
            if not over(src, dst):
                break
            for t in goal:
                i = fits(t, src, dst)
                if i is not None:
                    return [StandbyMove(t, i, dst)]
    src = max(clients.live, key=lambda e: (load[e] / clients.cores[e], e))
    dst = min(clients.live, key=lambda e: (load[e] / clients.cores[e], e))
    if not over(src, dst):
        return []
    for mid in clients.live:
        if mid in (src, dst):
            continue
        firsts = [(t, i) for t in goal if (i := fits(t, src, mid)) is not None]
        if not firsts:
            continue
        for t2 in goal:
            i2 = fits(t2, mid, dst)
            first = next(((t, i) for t, i in firsts if t != t2), None) if i2 is not None else None
            if first is not None and i2 is not None:
                return [StandbyMove(first[0], first[1], mid), StandbyMove(t2, i2, dst)]
    return []
