"""What the operator holds for each app between syncs (`AppController`: the last published
assignment, failover and status, the autoscaler's samples, the executor ids' container lives) and
what one sync sees (`Snapshot`: the app's pods, the nodes, the channel's documents, as the
handlers' indexes hold them). The steps of a sync (`orchestrator`, `scale_step`, `upgrade_step`)
read and update these."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from eddy_contract import channel
from eddy_operator.autoscaler import History, Sample
from eddy_operator.executor_ids import Incarnations
from eddy_operator.pods import PodInfo
from eddy_operator.status import Failover

__all__ = ["AppController", "AppKey", "EventPoster", "Snapshot", "now_iso"]

#: posts a Kubernetes Event about a StreamApp: (its body, type, reason, message)
EventPoster = Callable[[Mapping[str, Any], str, str, str], None]


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass
class AppController:
    """In-memory state of one app while the operator runs."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    message: channel.AssignmentMessage | None = None
    loaded: bool = False
    last_failover: Failover | None = None
    last_status: dict[str, Any] | None = None
    #: the executors announced as leaving (on a node being drained), so that each is said once
    leaving: frozenset[str] = frozenset()
    #: the autoscaler's samples of the executors' load, its recommendations, and what status shows
    samples: list[Sample] = field(default_factory=list)
    history: History = field(default_factory=History)
    autoscaling: dict[str, Any] | None = None
    #: which executor ids on pods are stale (their container restarted since)
    incarnations: Incarnations = field(default_factory=Incarnations)
    #: executors of `message` (id, pod) already reported lost while no executor was live to take
    #: their tasks (no assignment could be made): the assignment that fails them over says it no
    #: more. With its pod: a new driver hands the same ids out again, to other pods
    reported_lost: frozenset[tuple[str, str]] = frozenset()
    #: the pod addresses (runner keys) of the executors of every generation published since the
    #: last one a driver took: what a failover carried out without a driver fences (eddy_operator.driverless)
    recent_hosts: frozenset[str] = frozenset()
    #: the last generation the operator carried out itself, while no driver ran, and the last it
    #: said it could not
    carried_out: int = -1
    handover_failed: int = -1
    #: monotonic time before which a hand-over that failed is not tried again
    handover_retry_at: float = 0.0
    #: the app's push token (its `<app>-push-token` Secret), once read
    push_token: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """What the handlers read from their indexes for one app."""

    streamapp: Mapping[str, Any]
    pods: tuple[PodInfo, ...]
    nodes: Mapping[str, Mapping[str, str]]
    runtime_data: Mapping[str, str] | None
    assignment_data: Mapping[str, str] | None
    #: the `<app>-versions` ConfigMap (eddy_operator.upgrades)
    versions_data: Mapping[str, str] | None = None
    #: the nodes that are down, with when they went down (eddy_operator.node_loss)
    down_nodes: Mapping[str, str] = field(default_factory=dict)
    #: the nodes being drained: cordoned, or tainted for removal (eddy_operator.drains)
    draining_nodes: frozenset[str] = frozenset()
    #: executor pods whose runner stopped answering, with for how long (eddy_operator.reachability)
    unreachable: Mapping[str, float] = field(default_factory=dict)


class AppKey(NamedTuple):
    namespace: str
    app: str
    uid: str


