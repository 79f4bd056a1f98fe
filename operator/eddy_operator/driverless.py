"""A generation carried out while no driver runs (docs/DESIGN.md, "A failover without a driver";
docs/reliability.md, finding 5).

The driver hands each generation the operator publishes to the executors' task runners, fencing
first. Without a driver (its pod deleted or restarting, its node lost) a failover the operator
publishes waited for the next driver: 78-150 s of lateness when a node took the driver and an
executor together. The runners go on processing meanwhile, and the operator knows the assignment,
the runners' addresses and the app's push token; so while the driver is away the operator carries
out each generation it publishes itself, in the driver's order (eddy_contract.takeover):

1. each live runner is asked to let go of every active the generation gives another executor (as
   a new driver asks the runners of an earlier one: the operator cannot know which generation a
   runner last took, so it asks about every task);
2. one live runner fences, for the generation, the runners of the executors the generation dropped
   (lost: their pods' addresses, their runner keys); if a live runner did not let go cleanly,
   nothing is fenced and the generation waits (the next sync asks again);
3. each live runner takes the generation's copies of its executor (`TAKEOVER_PATH`).

A step that fails stops there: nothing is handed over unfenced, and the next driver carries the
generation out as before. Fencing for a generation raises an epoch to at least that generation
(runtime's protocol/fences.py), so a driver that does the same at the same time writes the same
epochs. The driver counts as away (`driver_away`) while no driver pod (not being deleted) runs
its container, and while it does not answer the operator's probes (`eddy_operator.reachability`:
a node lost with the driver on it).

Only for continuous apps under exactly-once: a micro-batch app has nothing a runner runs alone, and
an at-least-once app nothing to fence (its runners take pushed generations as they come).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import aiohttp

from eddy_contract import channel
from eddy_contract.assignor import Assignment
from eddy_contract.spec import ProcessingGuarantee, StreamAppSpec
from eddy_contract.takeover import (
    FENCE_PATH,
    RELEASE_PATH,
    TAKEOVER_PATH,
    TOKEN_HEADER,
    encode_fence,
    encode_release,
    encode_takeover,
)
from eddy_operator import builders, metrics
from eddy_operator.app_state import AppController, EventPoster, Snapshot
from eddy_operator.kube import Kube
from eddy_operator.pods import PodInfo
from eddy_operator.reachability import metrics_port

__all__ = ["FENCE_TIMEOUT_S", "HANDOVER_RETRY_S", "Handover", "carry_out", "driver_away", "hand_over_without_driver",
           "plan"]

log = logging.getLogger(__name__)

#: how long the runner asked to fence has (reading the fence topic, writing, fencing each id)
FENCE_TIMEOUT_S = 15.0
#: how long a runner has to take the generation
TAKEOVER_TIMEOUT_S = 3.0
#: the least time a live runner has to let go of its actives (the driver's RELEASE_TIMEOUT_S)
RELEASE_TIMEOUT_S = 3.0
#: how long after a hand-over that failed the operator tries again (each try asks every runner)
HANDOVER_RETRY_S = 5.0


def driver_away(pods: Sequence[PodInfo], unreachable: Mapping[str, float]) -> str | None:
    """Why no driver hands generations to the runners now, or None while one may."""
    drivers = [p for p in pods if p.role == "driver" and not p.deleting]
    if not drivers:
        return "no driver pod"
    driver = drivers[0]
    if driver.phase != "Running" or not driver.running:
        return f"driver pod {driver.name} is not running"
    if driver.name in unreachable:
        return f"driver pod {driver.name} has not answered for {unreachable[driver.name]:.0f}s"
    # A driver whose container runs is there, ready or not: a new one reads the fence epochs as its
    # SparkContext comes up, before its pod is marked ready, and it must be the only one to fence
    # for the generations it hands out (a runner fenced behind its back would find the epochs of its
    # work stale, and commit nothing until the next driver).
    return None


@dataclass(frozen=True)
class Handover:
    """What the operator asks of which runner (by its address, `ip:port`) for one generation."""

    generation: int
    #: runner address -> every task the generation gives another executor's active
    releases: Mapping[str, tuple[str, ...]]
    #: runner keys (pod addresses) of executors of recent generations that this one dropped: fenced
    lost: tuple[str, ...]
    #: runner address -> the (task, role) pairs the generation gives its executor
    copies: Mapping[str, tuple[tuple[str, str], ...]]


def plan(new: Assignment, hosts: Mapping[str, str], recent: Collection[str], port: int) -> Handover | None:
    """The requests that carry `new` out (`hosts`: executor id -> pod address of `new`'s executors;
    `recent`: the pod addresses of every executor of the generations published since the last one
    a driver took, which may hold actives). None if an executor of `new` has no known address (its
    runner cannot be reached). Pure."""
    executors = sorted(new.executors())
    if any(e not in hosts for e in executors):
        return None
    live = {hosts[e] for e in executors}
    # a runner outlives its executor's JVM: the address of a live pod is a live runner, whatever its id
    lost = tuple(sorted(set(recent) - live))
    copies: dict[str, list[tuple[str, str]]] = {f"{hosts[e]}:{port}": [] for e in executors}
    for task, placement in sorted(new.tasks.items()):
        copies[f"{hosts[placement.active]}:{port}"].append((task, "active"))
        for e in (*placement.standbys, *placement.warmups):
            copies[f"{hosts[e]}:{port}"].append((task, "standby"))
    releases = {f"{hosts[e]}:{port}": tuple(sorted(t for t, p in new.tasks.items() if p.active != e))
                for e in executors}
    return Handover(new.generation, releases, lost, {a: tuple(c) for a, c in copies.items()})


@dataclass
class Outcome:
    """What came of a hand-over, for the log and the Event."""

    generation: int
    fenced: tuple[str, ...] = ()
    taken: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    failed: str | None = None

    def describe(self) -> str:
        if self.failed is not None:
            return f"generation {self.generation} not carried out without a driver: {self.failed}"
        fenced = f"fenced {', '.join(self.fenced)}; " if self.fenced else ""
        refused = f"; not taken by {', '.join(self.refused)}" if self.refused else ""
        return (f"generation {self.generation} carried out while no driver runs: {fenced}"
                f"taken by the runners at {', '.join(self.taken) or 'none'}{refused}")


async def carry_out(handover: Handover, app: str, token: str, release_timeout_s: float) -> Outcome:
    """Release, fence, then hand the generation to each runner (see the module's docstring)."""
    outcome = Outcome(handover.generation)
    headers = {TOKEN_HEADER: token, "Content-Type": "application/json"}
    async with aiohttp.ClientSession(headers=headers) as session:  # each request has its own timeout

        async def post(address: str, path: str, body: bytes, within_s: float) -> dict[str, object] | None:
            try:
                async with session.post(f"http://{address}{path}", data=body,
                                        timeout=aiohttp.ClientTimeout(total=within_s)) as response:
                    text = await response.text()
                    if response.status != 200:
                        log.info("app %s: %s%s answered %d: %s", app, address, path, response.status, text[:200])
                        return None
                    answer = json.loads(text)
                    return answer if isinstance(answer, dict) else None
            except (aiohttp.ClientError, TimeoutError, ValueError) as e:
                log.info("app %s: %s%s: %r", app, address, path, e)
                return None

        addresses = sorted(handover.copies)
        asked = [a for a in addresses if handover.releases[a]]
        answers = await asyncio.gather(*(
            post(a, RELEASE_PATH, encode_release(app, handover.generation, handover.releases[a], release_timeout_s),
                 release_timeout_s + 2)
            for a in asked))
        unclean = sorted(a for a, answer in zip(asked, answers, strict=True) if not (answer or {}).get("released"))
        if unclean:
            # A live runner is not fenced behind a driver's back (it may be there after all, and
            # keep handing that runner work under its older epoch): the generation waits.
            outcome.failed = f"the runners at {', '.join(unclean)} did not let go in time"
            return outcome
        to_fence = handover.lost
        if to_fence:
            for address in addresses:  # any live runner can fence; the first that answers does
                answer = await post(address, FENCE_PATH,
                                    encode_fence(app, handover.generation, to_fence, FENCE_TIMEOUT_S),
                                    FENCE_TIMEOUT_S + 2)
                if answer is not None and answer.get("fenced") is True:
                    outcome.fenced = to_fence
                    break
            else:
                outcome.failed = f"no live runner could fence {', '.join(to_fence)}"
                return outcome
        taken = await asyncio.gather(*(
            post(a, TAKEOVER_PATH, encode_takeover(app, handover.generation, handover.copies[a]), TAKEOVER_TIMEOUT_S)
            for a in addresses))
        outcome.taken = tuple(a for a, answer in zip(addresses, taken, strict=True) if (answer or {}).get("taken"))
        outcome.refused = tuple(a for a in addresses if a not in outcome.taken)
        if not outcome.taken:  # a newcomer may refuse (no work yet), but not every runner
            outcome.failed = f"no runner took it ({', '.join(outcome.refused)} refused or did not answer)"
    return outcome


async def hand_over_without_driver(kube: Kube, event: EventPoster, ctl: AppController, snap: Snapshot,
                                   spec: StreamAppSpec, runtime: channel.RuntimeState | None) -> None:
    """The orchestrator's step: while no driver runs, hand the newest generation to the runners
(see the module's docstring). `event(body, type, reason, message)` posts an Event."""
    if (ctl.message is None or spec.execution != "continuous"
            or spec.processing_guarantee != ProcessingGuarantee.EXACTLY_ONCE):
        return
    generation = ctl.message.assignment.generation
    took = (runtime.assignment_generation or 0) if runtime is not None else 0
    if took < 1:
        return  # no driver has handed out one of the operator's generations: no runner runs anything yet
    if took >= generation:
        ctl.recent_hosts = frozenset(ctl.message.hosts.values())  # a driver took it
        return
    if generation <= ctl.carried_out or time.monotonic() < ctl.handover_retry_at \
            or (why := driver_away(snap.pods, snap.unreachable)) is None:
        return
    handover = plan(ctl.message.assignment, ctl.message.hosts, ctl.recent_hosts, metrics_port(snap.streamapp))
    if handover is None:
        return
    if ctl.push_token is None:
        ctl.push_token = await asyncio.to_thread(kube.secret_value, spec.namespace,
                                                 builders.push_token_secret_name(spec.name),
                                                 builders.PUSH_TOKEN_KEY)
        if ctl.push_token is None:
            log.warning("app %s/%s: no push token: generation %d waits for a driver", spec.namespace,
                        spec.name, generation)
            return
    started = time.monotonic()
    # the runners know the app by its Kafka application id (its topics' and transactions' prefix)
    outcome = await carry_out(handover, spec.application_id, ctl.push_token,
                              max(RELEASE_TIMEOUT_S, 5 * spec.trigger_interval_s))
    said = f"{outcome.describe()} ({why}; {time.monotonic() - started:.1f}s)"
    log.warning("app %s/%s: %s", spec.namespace, spec.name, said)
    if outcome.failed is None:
        ctl.carried_out = generation
        metrics.DRIVERLESS_HANDOVERS.labels(spec.namespace, spec.name).inc()
        event(snap.streamapp, "Normal", "HandedOverWithoutDriver", said)
    else:  # tried again at a later sync, HANDOVER_RETRY_S on; said once
        ctl.handover_retry_at = time.monotonic() + HANDOVER_RETRY_S
        if ctl.handover_failed < generation:
            ctl.handover_failed = generation
            event(snap.streamapp, "Warning", "HandOverFailed", said)
