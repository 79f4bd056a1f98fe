"""Which version of an app the driver runs, and when a new one is refused or rolled back
(docs/operations.md, "Upgrading an app"). Pure: what the operator observed in, a verdict out.

A version is the driver's config hash (`eddy_operator.spark_builders.config_hash`) with the spec
that made it. The operator keeps, in the app's `<app>-versions` ConfigMap (`VersionBook`):

- `wanted`: what the StreamApp asks for now (written at every reconcile);
- `healthy`: the last version whose driver ran healthily: its pod ready and the runtime state
  published since it started, with an assignment generation (it runs batches);
- `rejected`: versions refused by the topology gate (the new driver's verdict, before it touched
  anything: eddy_runtime.driver.upgrade_gate) or failed by the health gate (the driver container
  restarting `CRASH_RESTARTS` times, or not healthy within `spec.upgrade.healthTimeout`).

`reconcile` applies `VersionBook.to_apply`: the wanted version unless it was rejected, and then
the healthy one (the old version keeps running: its executors never stopped, see
eddy_runtime.driver.executor_set). A rejected version is not tried again until the spec changes
(a new hash). A refusal always goes back; a failure goes back only with `spec.upgrade.rollback`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from eddy_contract import channel
from eddy_operator.pods import PodInfo

__all__ = ["CRASH_RESTARTS", "DriverSeen", "Rejection", "RejectionKind", "Verdict", "Version", "VersionBook",
           "driver_seen", "judge"]

#: a new version's driver container restarted this often: it failed its health gate
CRASH_RESTARTS = 3

WANTED_KEY = "wanted.json"
HEALTHY_KEY = "healthy.json"
REJECTED_KEY = "rejected.json"


@dataclass(frozen=True)
class Version:
    """One version of the app: its config hash and the spec (manifest `spec`) that made it."""

    hash: str
    spec: Mapping[str, Any]


class RejectionKind(StrEnum):
    #: the topology gate refused it (it would break the running state)
    REFUSED = "refused"
    #: it failed the health gate
    FAILED = "failed"


@dataclass(frozen=True)
class Rejection:
    kind: RejectionKind
    reason: str
    at: str
    #: the version the app went back to (None: it did not: no healthy version, or rollback off)
    rolled_back_to: str | None = None


@dataclass(frozen=True)
class VersionBook:
    """The `<app>-versions` ConfigMap's content."""

    wanted: Version | None = None
    healthy: Version | None = None
    rejected: Mapping[str, Rejection] = field(default_factory=dict)

    def to_apply(self) -> Version | None:
        """The version the driver should run: the wanted one, unless it was rejected and went
        back to a healthy one."""
        if self.wanted is None:
            return None
        rejection = self.rejected.get(self.wanted.hash)
        if rejection is not None and rejection.rolled_back_to is not None and self.healthy is not None \
                and self.healthy.hash == rejection.rolled_back_to:
            return self.healthy
        return self.wanted

    def to_data(self) -> dict[str, str]:
        data = {REJECTED_KEY: json.dumps({h: {"kind": str(r.kind), "reason": r.reason, "at": r.at,
                                              "rolledBackTo": r.rolled_back_to}
                                          for h, r in sorted(self.rejected.items())}, sort_keys=True)}
        for key, version in ((WANTED_KEY, self.wanted), (HEALTHY_KEY, self.healthy)):
            if version is not None:
                data[key] = json.dumps({"hash": version.hash, "spec": version.spec}, sort_keys=True)
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, str] | None) -> VersionBook:
        data = data or {}

        def version(key: str) -> Version | None:
            if not data.get(key):
                return None
            doc = json.loads(data[key])
            return Version(str(doc["hash"]), dict(doc["spec"]))

        rejected = {h: Rejection(RejectionKind(r["kind"]), str(r["reason"]), str(r["at"]), r.get("rolledBackTo"))
                    for h, r in json.loads(data.get(REJECTED_KEY) or "{}").items()}
        return cls(version(WANTED_KEY), version(HEALTHY_KEY), rejected)

    def with_wanted(self, wanted: Version) -> VersionBook:
        return replace(self, wanted=wanted)


@dataclass(frozen=True)
class DriverSeen:
    """The app's driver pod as the operator sees it."""

    #: its `eddy.dev/config-hash` annotation: the version it runs
    hash: str | None
    ready: bool
    #: restarts of its container
    restarts: int
    #: seconds since the pod started
    age_s: float
    #: the runtime state was published since the pod started, with an assignment generation
    running_batches: bool


def driver_seen(pods: Iterable[PodInfo], runtime: channel.RuntimeState | None) -> DriverSeen | None:
    """The app's driver pod as the upgrade gates judge it (None while there is none)."""
    drivers = [p for p in pods if p.role == "driver" and not p.deleting]
    if not drivers:
        return None
    d = drivers[0]
    started = _instant(d.started_at)
    age = (datetime.now(UTC) - started).total_seconds() if started is not None else 0.0
    published = _instant(runtime.updated_at) if runtime is not None else None
    batches = (runtime is not None and runtime.assignment_generation is not None and published is not None
               and started is not None and published > started)
    return DriverSeen(d.config_hash, d.phase == "Running" and d.ready, d.restarts, age, batches)


def _instant(text: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Verdict:
    """What the operator should do about the wanted version now."""

    #: the wanted version ran healthily (it becomes the healthy one)
    healthy: Version | None = None
    #: the wanted version is rejected
    rejection: Rejection | None = None


def judge(book: VersionBook, driver: DriverSeen | None, gate: Mapping[str, Any] | None, *, now: str,
          health_timeout_s: float, rollback: bool) -> Verdict:
    """The verdict on the wanted version, from its driver pod and the topology gate's verdict
    (`gate`: the runtime state's `upgrade.json`, eddy_runtime.driver.upgrade_gate)."""
    wanted = book.wanted
    if wanted is None or wanted.hash in book.rejected:
        return Verdict()
    back_to = book.healthy.hash if book.healthy is not None and book.healthy.hash != wanted.hash else None
    if gate is not None and gate.get("configHash") == wanted.hash and gate.get("allowed") is False:
        reasons = "; ".join(str(r) for r in gate.get("reasons") or ()) or "the new topology breaks the running state"
        return Verdict(rejection=Rejection(RejectionKind.REFUSED, reasons, now, back_to))
    if driver is None or driver.hash != wanted.hash:
        return Verdict()
    if driver.ready and driver.running_batches:
        return Verdict(healthy=wanted) if book.healthy is None or book.healthy.hash != wanted.hash else Verdict()
    if book.healthy is not None and book.healthy.hash == wanted.hash:
        return Verdict()  # a version that ran healthily before: a restart is not an upgrade
    problem = None
    if driver.restarts >= CRASH_RESTARTS:
        problem = f"the driver container restarted {driver.restarts} times"
    elif driver.age_s > health_timeout_s:
        problem = f"the driver ran no batch within spec.upgrade.healthTimeout ({health_timeout_s:.0f}s)"
    if problem is None:
        return Verdict()
    return Verdict(rejection=Rejection(RejectionKind.FAILED, problem, now, back_to if rollback else None))
