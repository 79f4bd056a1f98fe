"""Executors that stopped answering: a node lost without a word fails over in seconds, not when
Kubernetes marks it not Ready (docs/operations.md, "Node loss").

A node that dies (power, kernel, a cut network) stops renewing its kubelet's Lease; Kubernetes
marks it not Ready only after the controller-manager's `--node-monitor-grace-period` (50 s by
default), and until then its pods look Running. Kafka Streams and Flink do not wait for that: a
member that misses its heartbeats for `session.timeout.ms` (Flink: `heartbeat.timeout`) is taken
out of the group. Eddy's operator does the same from where it sits: `PROBE_INTERVAL_S` after each
round it asks each executor's task runner for `/healthz` on the pod's metrics port (the endpoint
the driver pushes work to, executor/runner.py), waiting `answer_timeout_s` for each answer, and an
executor whose runner has answered before but not for `after_s` counts as lost
(`pods.LossReason.UNREACHABLE`): its actives fail over to their standbys as for a pod that is gone.
Fencing keeps a runner that is only cut off from the operator (not from Kafka) from committing
once its tasks' new owners have started: a false alarm costs a move, never a record. When it
answers again it is live again and gets copies as a new executor would.

A pod's record is keyed by its uid and restart count, so a restarted container is judged afresh; a
runner that has never answered is judged only once its containers have run for `STARTUP_GRACE_S`
(a runner starts with its first Spark task), so that an operator leader that took over from one
on the node that died still finds that node's executors silent. Where every executor of an app is
silent, or none has ever answered, none is judged: the operator is then more likely cut off from
them (a NetworkPolicy, its own node) than they all died at once, and nodes that did die are still
found not Ready. The
chart turns the probe on (`failover.unreachableAfterSeconds`, `EDDY_OPERATOR_UNREACHABLE_AFTER`);
an operator run outside the cluster (tests, `kopf run` on a laptop) cannot reach pod addresses and
leaves it off. `Reachability` is pure (the clock is passed in); `probe` does the HTTP.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp

from eddy_contract.spec import StreamAppSpec
from eddy_operator.pods import PodInfo, instant

__all__ = ["PROBE_INTERVAL_S", "UNREACHABLE_AFTER_ENV", "Reachability", "answer_timeout_s", "metrics_port", "probe",
           "probe_targets", "unreachable_after_s"]

#: the operator's setting (the chart's `failover.unreachableAfterSeconds`); unset or 0: no probing
UNREACHABLE_AFTER_ENV = "EDDY_OPERATOR_UNREACHABLE_AFTER"
PROBE_INTERVAL_S = 1.0
#: how long an executor's containers run before a runner that never answered counts as silent:
#: on the 2-core bench machine under the e2e stage, an autoscaling test's runners first answered
#: 73-74 s after their containers started (the Spark task that starts a runner came that late), and
#: with 60 s a runner was taken for lost before it had started; a leader that took over still
#: judges the silent executors of a dead node, if they ran that long
STARTUP_GRACE_S = 180.0
PROBE_PATH = "/healthz"


def unreachable_after_s() -> float:
    """Seconds without an answer after which an executor counts as lost; 0 when probing is off."""
    try:
        return max(0.0, float(os.environ.get(UNREACHABLE_AFTER_ENV, "0") or 0))
    except ValueError:
        return 0.0


#: one container's life of one pod: (name, uid, restarts)
PodKey = tuple[str, str, int]


def key_of(pod: PodInfo) -> PodKey:
    return (pod.name, pod.uid or "", pod.restarts)


@dataclass
class Reachability:
    """When each probed executor pod last answered, and which have not for `after_s`."""

    after_s: float
    _answered_at: dict[PodKey, float] = field(default_factory=dict)
    _probed_at: dict[PodKey, float] = field(default_factory=dict)
    _first_probed_at: dict[PodKey, float] = field(default_factory=dict)

    def record(self, key: PodKey, answered: bool, now: float) -> None:
        self._probed_at[key] = now
        self._first_probed_at.setdefault(key, now)
        if answered:
            self._answered_at[key] = now

    def keep_only(self, keys: Iterable[PodKey]) -> None:
        """Forget every pod but `keys` (the ones still probed)."""
        kept = set(keys)
        for record in (self._answered_at, self._probed_at, self._first_probed_at):
            for key in [k for k in record if k not in kept]:
                del record[key]

    def silent_for(self, key: PodKey, now: float, running_for_s: float | None = None) -> float | None:
        """Seconds the pod has been silent, if it failed every probe for at least `after_s` since
        it last answered; None if it is reachable, or never answered and may still be starting.

        A pod never heard from counts from this operator's first probe of it, but only once its
        containers have run for `STARTUP_GRACE_S` (`running_for_s`): its runner starts with its
        first Spark task, and a leader that took over from one on a node that died has never heard
        from that node's executors."""
        answered = self._answered_at.get(key)
        if answered is None:
            if running_for_s is None or running_for_s < STARTUP_GRACE_S or key not in self._first_probed_at:
                return None
            since = self._first_probed_at[key]
        elif self._probed_at.get(key, answered) <= answered:
            return None
        else:
            since = answered
        silent = now - since
        return silent if silent >= self.after_s else None

    def unreachable(self, pods: Iterable[PodInfo], now: float, wall: datetime | None = None) -> dict[str, float]:
        """Pod name -> seconds silent, for each of one app's `pods` that counts as unreachable
        (`wall`: the time of day now, for how long their containers have run); none if every one
        of them would."""
        wall = wall or datetime.now(UTC)
        probed = [p for p in pods if key_of(p) in self._probed_at]
        # Where no executor of the app answers, or none ever has, the operator is more likely cut
        # off from them (a NetworkPolicy, its own node) than they all died: it judges none.
        if not any(key_of(p) in self._answered_at for p in probed):
            return {}
        found = {}
        for pod in probed:
            running_for = (wall - instant(pod.running_since)).total_seconds() if pod.running_since else None
            silent = self.silent_for(key_of(pod), now, running_for)
            if silent is not None:
                found[pod.name] = silent
        return {} if len(found) == len(probed) else found


def metrics_port(streamapp: Mapping[str, Any]) -> int:
    """The app's `spec.metricsPort`, which the apiserver defaults (parsed with the CRD's defaults
    if it is missing, as in a manifest not read back from the apiserver)."""
    port = (streamapp.get("spec") or {}).get("metricsPort")
    return int(port) if port else StreamAppSpec.from_manifest(streamapp).metrics_port


def answer_timeout_s(after_s: float) -> float:
    """How long one probe waits for an answer: what `after_s` leaves beside the round's pause
    (`PROBE_INTERVAL_S`), at least that pause. A runner slow to answer is there: on the 2-core
    test machine, a driver's deletion started a new driver and a new executor JVM on the node of a
    runner that went on processing, and with a 1 s timeout that runner missed 3 s of probes and
    was taken for lost (the short fault campaign in CI, 2026-11-29). A runner that is gone still
    counts as lost `after_s` after its last answer: its probes time out in this, one after the other."""
    return max(PROBE_INTERVAL_S, after_s - PROBE_INTERVAL_S)


def probe_targets(pods: Iterable[PodInfo], port: int) -> dict[PodKey, str]:
    """The `/healthz` address of each executor pod worth probing (running, registered, with an
    address), and of the driver pod while its container runs: a driver that stops answering is
    away, and the operator hands generations to the runners itself (eddy_operator.driverless)."""
    return {key_of(p): f"http://{p.ip}:{port}{PROBE_PATH}" for p in pods
            if p.ip and (p.live_executor or (p.role == "driver" and p.running and not p.deleting))}


async def probe(targets: Mapping[PodKey, str], timeout_s: float) -> dict[PodKey, bool]:
    """GET every target at once (aiohttp, kopf's own client: no thread per probe); whether each
    answered 200 within `timeout_s`."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:

        async def get(url: str) -> bool:
            try:
                async with session.get(url) as response:
                    return response.status == 200
            except (aiohttp.ClientError, TimeoutError):
                return False

        keys = list(targets)
        answers = await asyncio.gather(*(get(targets[k]) for k in keys))
    return dict(zip(keys, answers, strict=True))
