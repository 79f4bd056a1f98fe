"""Rule 1, last step: move a stateful task's target, or trade the targets of two, when that puts
more of them on caught-up copies, or as many and more of them on their previous (sticky)
executor. Trades also go on, as many of both kept, towards previous copies (a warmup under way
keeps its target), then towards fewer records to restore: Kafka Streams ranks the copies that
are not caught up by lag. A move keeps the balance (`ClientState.as_balanced`, in total and in
the task's sub-topology), as when a balanced previous assignment dealt a remainder to another
executor than the quotas did; a trade keeps every executor within its per-core bounds of each
sub-topology. Each step raises (caught up, sticky, previous copy, - records to restore) summed
over all tasks, so the swapping ends.

Records to restore: the target's lag if it is not caught up, else none (caught-up copies are
equals, as in Kafka Streams; their lags move with every commit and must not move actives)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from eddy_contract.assignment.app_tasks import AppTasks, TaskGroup
from eddy_contract.assignment.client_state import ClientState


class _Bounds(NamedTuple):
    """The fewest and the most of one group's actives an executor may hold."""

    low: int
    high: int


class _Score(NamedTuple):
    caught_up: int
    sticky: int
    warm: int  # a previous copy: a warmup under way keeps its target (else targets flip-flop)
    unrestored: int  # minus the records to restore


def swap_towards_caught_up(target: dict[str, str], tasks: AppTasks, clients: ClientState) -> None:
    """Move and swap targets in place (see the module's docstring)."""
    bounds = _bounds(tasks, clients)
    count: dict[TaskGroup, dict[str, int]] = {g: {e: 0 for e in clients.live} for g in tasks.groups}
    for t, e in target.items():
        count[TaskGroup.of(t)][e] += 1
    by_target: dict[str, list[str]] = {e: [] for e in clients.live}
    for t in target:
        by_target[target[t]].append(t)

    def score(t: str, e: str) -> _Score:
        caught_up = clients.caught_up(e, t)
        return _Score(int(caught_up), int(clients.sticky(t) == e), int(clients.was_copy(e, t)),
                      0 if caught_up else -clients.lag(e, t))

    def within_bounds(gt: TaskGroup, gu: TaskGroup, x: str, y: str) -> bool:
        """A task of `gt` may leave x for y and one of `gu` leave y for x."""
        return (count[gt][x] - 1 >= bounds[gt][x].low and count[gt][y] + 1 <= bounds[gt][y].high
                and count[gu][y] - 1 >= bounds[gu][y].low and count[gu][x] + 1 <= bounds[gu][x].high)

    changed = True
    while changed:
        changed = False
        for t in target:
            x, gt = target[t], TaskGroup.of(t)
            for y in clients.live:
                if y == x or score(t, y) <= score(t, x):
                    continue
                if score(t, y)[:2] > score(t, x)[:2] \
                        and clients.as_balanced({e: len(ts) for e, ts in by_target.items()}, x, y) \
                        and clients.as_balanced(count[gt], x, y):
                    target[t] = y
                    by_target[x].remove(t)
                    by_target[y].append(t)
                    count[gt][x] -= 1
                    count[gt][y] += 1
                    changed = True
                    break
                for u in by_target[y]:
                    gu = TaskGroup.of(u)
                    ty, ux, tx, uy = score(t, y), score(u, x), score(t, x), score(u, y)
                    gain = tuple(a + b - c - d for a, b, c, d in zip(ty, ux, tx, uy, strict=True))
                    if gain <= (0, 0, 0, 0):
                        continue
                    if gu != gt and not within_bounds(gt, gu, x, y):
                        continue
                    target[t], target[u] = y, x
                    by_target[y].remove(u)
                    by_target[x].remove(t)
                    by_target[y].append(t)
                    by_target[x].append(u)
                    for g, e, d in ((gt, x, -1), (gt, y, 1), (gu, y, -1), (gu, x, 1)):
                        count[g][e] += d
                    changed = True
                    break
                if target[t] != x:
                    break


def _bounds(tasks: AppTasks, clients: ClientState) -> Mapping[TaskGroup, Mapping[str, _Bounds]]:
    """Per group and executor: balanced per core, each core holds base or base + 1."""
    capacity = sum(clients.cores.values())
    out: dict[TaskGroup, dict[str, _Bounds]] = {}
    for g, members in tasks.groups.items():
        base, extra = divmod(len(members), capacity)
        out[g] = {e: _Bounds(base * clients.cores[e], base * clients.cores[e] + min(extra, clients.cores[e]))
                  for e in clients.live}
    return out
