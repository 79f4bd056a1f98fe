"""The assignor's placement rules on plain data (docs/DESIGN.md, "The operator's part": Assign).

`eddy_contract.assignor` wraps this in its public types; the rules are listed in its docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from eddy_contract.tasks import task_sort_key

# (active, standbys, warmups) of one task
Placement = tuple[str, tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True)
class Node:
    """An executor as the rules see it: id, zone (None if unknown) and capacity in cores."""

    id: str
    zone: str | None
    cores: int


def _group(task: str, stateful: bool) -> tuple[bool, int, int, str]:
    """Tasks are balanced per kind (stateful first) and per sub-topology."""
    s, _, rest = task_sort_key(task)
    return (not stateful, s, 0, rest)


class Plan:
    """One run of the rules; holds the derived tables so the steps stay short."""

    def __init__(
        self,
        nodes: Sequence[Node],
        lag: Mapping[tuple[str, str], int],
        tasks: Collection[str],
        stateful: Collection[str],
        previous: Mapping[str, Placement],
        standby_replicas: int,
        acceptable_recovery_lag: int,
        max_warmup_replicas: int,
    ) -> None:
        self.live = tuple(sorted(n.id for n in nodes))
        self.zone = {n.id: n.zone for n in nodes}
        self.cores = {n.id: n.cores for n in nodes}
        self.tasks = tuple(sorted(tasks, key=task_sort_key))
        self.stateful = frozenset(stateful)
        self.lag = lag
        self.prev = previous
        self.standby_replicas = standby_replicas
        self.acceptable = acceptable_recovery_lag
        self.max_warmups = max_warmup_replicas
        self.groups: dict[tuple[bool, int, int, str], list[str]] = {}
        for t in self.tasks:
            if t in self.stateful:
                self.groups.setdefault(_group(t, True), []).append(t)

    def caught_up(self, executor: str, task: str) -> bool:
        return self.lag[(executor, task)] <= self.acceptable

    def prev_active(self, task: str) -> str | None:
        p = self.prev.get(task)
        return p[0] if p is not None else None

    def was_copy(self, executor: str, task: str) -> bool:
        p = self.prev.get(task)
        return p is not None and (executor == p[0] or executor in p[1] or executor in p[2])

    def sticky(self, task: str) -> str | None:
        """The previous active, if it is live and caught up: the task should stay there."""
        p = self.prev_active(task)
        return p if p in self.cores and self.caught_up(p, task) else None

    def _freshest(self, task: str) -> Callable[[str], tuple[bool, int, bool, str]]:
        """Order executors for `task`: caught up, then least lag, then a previous copy, then id."""
        return lambda e: (not self.caught_up(e, task), self.lag[(e, task)], not self.was_copy(e, task), e)

    def run(self) -> dict[str, Placement]:
        target = self.target_actives()
        active = self.actual_actives(target)
        self.place_stateless(active)
        target.update({t: e for t, e in active.items() if t not in self.stateful})
        wanted = {t: (active[t] != target[t], target[t]) for t in self.tasks}
        standbys, standby_moves = self.standbys(active, target)
        warmups = self.warmups(active, standbys, [(t, e) for t, (m, e) in wanted.items() if m], standby_moves)
        return {t: (active[t], tuple(sorted(standbys.get(t, ()))), tuple(sorted(warmups.get(t, ()))))
                for t in self.tasks}

    # Where actives belong once every copy has caught up: balanced per core in total, per kind
    # and per sub-topology (a round robin over cores), as sticky to the previous actives as that allows.
    def quotas(self) -> dict[tuple[bool, int, int, str], dict[str, int]]:
        slots = [(e, i) for e in self.live for i in range(self.cores[e])]
        total = {s: 0 for s in slots}
        out: dict[tuple[bool, int, int, str], dict[str, int]] = {}
        for g, tasks in self.groups.items():
            stick = {e: 0 for e in self.live}
            for t in tasks:
                if (p := self.sticky(t)) is not None:
                    stick[p] += 1
            base, extra = divmod(len(tasks), len(slots))
            # an executor's cores fill up in step with the others' (Kafka's least loaded client)
            order = sorted(slots, key=lambda s: (total[s], s[1] / self.cores[s[0]], -stick[s[0]], s))
            quota = {e: 0 for e in self.live}
            for n, s in enumerate(order):
                got = base + (1 if n < extra else 0)
                total[s] += got
                quota[s[0]] += got
            out[g] = quota
        return out

    def target_actives(self) -> dict[str, str]:
        quotas = self.quotas()
        target: dict[str, str] = {}
        for g, tasks in self.groups.items():
            left = dict(quotas[g])
            rest = []
            for t in tasks:
                p = self.sticky(t)
                if p is not None and left[p] > 0:
                    target[t] = p
                    left[p] -= 1
                else:
                    rest.append(t)
            for t in rest:
                e = min((e for e in self.live if left[e] > 0), key=self._freshest(t))
                target[t] = e
                left[e] -= 1
        self.repair(target, quotas)
        return target

    def repair(self, target: dict[str, str], quotas: Mapping[tuple[bool, int, int, str], Mapping[str, int]]) -> None:
        """Swap the targets of two tasks when that makes more targets caught up, or as many and
        more of them sticky, within every per-core bound; each swap raises (caught up, sticky)
        over all tasks, so this ends."""
        bounds = self._bounds(quotas)
        count: dict[tuple[bool, int, int, str], dict[str, int]] = {g: {e: 0 for e in self.live} for g in self.groups}
        for t, e in target.items():
            count[_group(t, True)][e] += 1
        by_target: dict[str, list[str]] = {e: [] for e in self.live}
        for t in target:
            by_target[target[t]].append(t)

        def score(t: str, e: str) -> tuple[int, int]:
            return (int(self.caught_up(e, t)), int(self.sticky(t) == e))

        changed = True
        while changed:
            changed = False
            for t in target:
                x, gt = target[t], _group(t, True)
                for y in self.live:
                    if y == x or score(t, y) <= score(t, x):
                        continue
                    for u in by_target[y]:
                        gu = _group(u, True)
                        ty, ux, tx, uy = score(t, y), score(u, x), score(t, x), score(u, y)
                        gain = (ty[0] + ux[0] - tx[0] - uy[0], ty[1] + ux[1] - tx[1] - uy[1])
                        if gain <= (0, 0):
                            continue
                        if gu != gt and not (
                            count[gt][x] - 1 >= bounds[gt][x][0] and count[gt][y] + 1 <= bounds[gt][y][1]
                            and count[gu][y] - 1 >= bounds[gu][y][0] and count[gu][x] + 1 <= bounds[gu][x][1]
                        ):
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

    def _bounds(
        self, quotas: Mapping[tuple[bool, int, int, str], Mapping[str, int]]
    ) -> dict[tuple[bool, int, int, str], dict[str, tuple[int, int]]]:
        capacity = sum(self.cores.values())
        out: dict[tuple[bool, int, int, str], dict[str, tuple[int, int]]] = {}
        for g, tasks in self.groups.items():
            base, extra = divmod(len(tasks), capacity)
            out[g] = {e: (base * self.cores[e], base * self.cores[e] + min(extra, self.cores[e])) for e in self.live}
        return out

    def actual_actives(self, target: Mapping[str, str]) -> dict[str, str]:
        """An active moves to its target only if the target is caught up; else it stays on a
        caught-up copy (its previous one first) and the target warms up; if no copy is caught
        up, the freshest copy takes it."""
        active: dict[str, str] = {}
        pending = []
        for t in target:
            if self.caught_up(target[t], t):
                active[t] = target[t]
            elif (p := self.sticky(t)) is not None:
                active[t] = p
            else:
                pending.append(t)
        load = {e: 0 for e in self.live}
        for e in active.values():
            load[e] += 1
        for t in pending:
            ups = [e for e in self.live if self.caught_up(e, t)]
            p, d = self.prev_active(t), target[t]
            if ups:
                best = min(ups, key=lambda e: ((load[e] + 1) / self.cores[e], self.lag[(e, t)], e))  # noqa: B023
            else:
                best = min(self.live, key=lambda e: (self.lag[(e, t)], e != p, e != d, e))  # noqa: B023
            active[t] = best
            load[best] += 1
        return active

    def place_stateless(self, active: dict[str, str]) -> None:
        """Stateless tasks fill up the least loaded executors (per core): in total first, then
        per sub-topology, then among stateless tasks; the previous executor only breaks ties."""
        total = {e: 0 for e in self.live}
        for e in active.values():
            total[e] += 1
        kind = {e: 0 for e in self.live}
        group: dict[tuple[int, str], int] = {}
        for t in self.tasks:
            if t in self.stateful:
                continue
            s = task_sort_key(t)[0]
            p = self.prev_active(t)

            def load(e: str, s: int = s, p: str | None = p) -> tuple[float, float, float, bool, str]:
                c = self.cores[e]
                return ((total[e] + 1) / c, (group.get((s, e), 0) + 1) / c, (kind[e] + 1) / c, e != p, e)

            best = min(self.live, key=load)
            active[t] = best
            total[best] += 1
            kind[best] += 1
            group[(s, best)] = group.get((s, best), 0) + 1

    def standbys(
        self, active: Mapping[str, str], target: Mapping[str, str]
    ) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
        """Standbys go where stateful copies (actives and standbys) stay balanced per core, in a
        zone the task's copies do not use yet; a standby that would have to restore gives way to
        a caught-up copy, and its place becomes a warmup (returned second)."""
        goal = self.standby_targets(active, target)
        standbys: dict[str, list[str]] = {}
        moves: list[tuple[str, str]] = []
        for t, wanted in goal.items():
            chosen = list(wanted)
            # who gives way first: executors that held no copy, then warmups under way (they go on
            # warming up), previous standbys last; the same one every round (a fixed point)
            cold = sorted((e for e in wanted if not self.caught_up(e, t)),
                          key=lambda e: (self._was_standby(e, t), not self._was_warmup(e, t), e))  # noqa: B023
            for best in cold:
                i = chosen.index(best)
                others = [active[t], *chosen[:i], *chosen[i + 1:]]
                used = {self.zone[e] for e in others}
                hot = [e for e in self.live if e not in others and e not in wanted and self.caught_up(e, t)
                       and (self.zone[e] not in used or self.zone[best] in used)]
                if hot:
                    chosen[i] = min(hot, key=self._freshest(t))
                    moves.append((t, best))
            standbys[t] = chosen
        return standbys, moves

    def standby_targets(self, active: Mapping[str, str], target: Mapping[str, str]) -> dict[str, list[str]]:
        """Where standbys belong once caught up: each on the least loaded executor (per core) in
        a zone the task's copies do not use yet; then single standbys move from an executor whose
        copies are two or more above another's while zones allow."""
        wanted = min(self.standby_replicas, len(self.live) - 1)
        stateful = [t for t in self.tasks if t in self.stateful]
        load = {e: 0 for e in self.live}
        for t in stateful:
            load[target[t]] += 1
        goal: dict[str, list[str]] = {t: [] for t in stateful}
        # previous copies keep their place first (warmups that stood in for a standby, then
        # standbys), then the least loaded executors take the rest
        for t in stateful:
            p = self.prev.get(t)
            seeds = [e for e in (*p[2], *p[1]) if e in self.cores and (e != target[t] or e in p[1])] if p else []
            for new_zone_only in (True, False):  # seeds in zones the copies lack go first
                for e in seeds:
                    used = {self.zone[x] for x in (active[t], *goal[t])}
                    if new_zone_only and self.zone[e] in used:
                        continue
                    if len(goal[t]) < wanted and self._may_take(e, t, active[t], goal[t]):
                        goal[t].append(e)
                        load[e] += 1
        for t in stateful:
            chosen = goal[t]
            while len(chosen) < wanted:
                used = {self.zone[e] for e in (active[t], *chosen)}
                free = [e for e in self.live if e != active[t] and e not in chosen]
                best = min(free, key=lambda e: (  # noqa: B023
                    self.zone[e] in used, load[e] / self.cores[e], e != target[t],  # noqa: B023
                    not self.caught_up(e, t), self.lag[(e, t)], e))  # noqa: B023
                load[best] += 1
                chosen.append(best)
        for _ in range(len(stateful) * wanted * len(self.live)):
            moves = self._standby_move(active, goal, load)
            if not moves:
                break
            for t, i, dst in moves:
                load[goal[t][i]] -= 1
                load[dst] += 1
                goal[t][i] = dst
        return goal

    def _may_take(self, e: str, task: str, active: str, chosen: Sequence[str]) -> bool:
        """`e` is live, holds no copy of `task` yet and does not give up a zone the copies could use."""
        if e not in self.cores or e == active or e in chosen:
            return False
        used = {self.zone[x] for x in (active, *chosen)}
        return self.zone[e] not in used or all(
            self.zone[f] in used for f in self.live if f != active and f not in chosen)

    def _standby_move(
        self, active: Mapping[str, str], goal: Mapping[str, list[str]], load: Mapping[str, int]
    ) -> list[tuple[str, int, str]]:
        """Standby moves (task, index in its standbys, new executor) that take one standby off the
        most loaded executor onto a less loaded one: directly if that one may take one of them, else
        through a third executor that takes one and hands another on (its load stays), as when
        every standby of the loaded executor is of a task the less loaded one already holds."""
        def fits(t: str, src: str, dst: str) -> int | None:
            chosen = goal[t]
            if src not in chosen or dst in chosen or dst == active[t]:
                return None
            others = {self.zone[e] for e in (active[t], *chosen) if e != src}
            return chosen.index(src) if self.zone[dst] not in others or self.zone[src] in others else None

        def over(src: str, dst: str) -> bool:
            return load[src] / self.cores[src] > (load[dst] + 1) / self.cores[dst]

        for src in sorted(self.live, key=lambda e: (-load[e] / self.cores[e], e)):
            for dst in sorted(self.live, key=lambda e: (load[e] / self.cores[e], e)):
                if not over(src, dst):
                    break
                for t in goal:
                    i = fits(t, src, dst)
                    if i is not None:
                        return [(t, i, dst)]
        src = max(self.live, key=lambda e: (load[e] / self.cores[e], e))
        dst = min(self.live, key=lambda e: (load[e] / self.cores[e], e))
        if not over(src, dst):
            return []
        for mid in self.live:
            if mid in (src, dst):
                continue
            firsts = [(t, i) for t in goal if (i := fits(t, src, mid)) is not None]
            if not firsts:
                continue
            for t2 in goal:
                i2 = fits(t2, mid, dst)
                first = next(((t, i) for t, i in firsts if t != t2), None) if i2 is not None else None
                if first is not None and i2 is not None:
                    return [(first[0], first[1], mid), (t2, i2, dst)]
        return []

    def warmups(
        self,
        active: Mapping[str, str],
        standbys: Mapping[str, Sequence[str]],
        active_moves: Sequence[tuple[str, str]],
        standby_moves: Sequence[tuple[str, str]],
    ) -> dict[str, list[str]]:
        """At most maxWarmupReplicas over the app; warmups under way keep their budget first."""
        moves = sorted(
            [*((0, t, e) for t, e in active_moves), *((1, t, e) for t, e in standby_moves)],
            key=lambda m: (not self._was_warmup(m[2], m[1]), m[0], task_sort_key(m[1]), m[2]),
        )
        budget = self.max_warmups
        warmups: dict[str, list[str]] = {}
        for _, t, e in moves:
            if e == active[t] or e in standbys.get(t, ()) or e in warmups.get(t, ()):
                continue
            if budget <= 0:
                break
            warmups.setdefault(t, []).append(e)
            budget -= 1
        return warmups

    def _was_standby(self, executor: str, task: str) -> bool:
        p = self.prev.get(task)
        return p is not None and executor in p[1]

    def _was_warmup(self, executor: str, task: str) -> bool:
        p = self.prev.get(task)
        return p is not None and executor in p[2]
