"""Leader election over a coordination.k8s.io/v1 Lease: of the operator's replicas, one handles
StreamApps; the others wait and take over when it stops renewing (docs/DESIGN.md, "The
operator's part": Stay available).

`main.py` runs `LeaderElector.campaign()` before it starts kopf, `keep_renewing()` while kopf runs
and `release()` after kopf stopped. kopf's own peering stays off (standalone): the Lease decides.

The protocol is client-go's (`k8s.io/client-go/tools/leaderelection`): every write is a
compare-and-swap on the Lease's resourceVersion, and nobody trusts another machine's clock. A
candidate measures a holder's silence on its own monotonic clock, from the moment it first saw
the Lease's current version; the leader measures from the moment it *sent* its last successful
renewal, and gives up `renew_deadline` after that, which is `2 * retry` shorter than the lease
duration. So the leader has stopped (the process exits) before any candidate can see the lease
as expired, and two leaders never act at once.

The decisions (`LeaderTiming`, `Observation`, `may_acquire`, `must_give_up`) are pure; the
`LeaseLock` and `LeaderElector` classes are the edges that talk to the apiserver.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)


class LeaderElectionError(ValueError):
    """Bad leader-election settings; the message names the flag or variable."""


@dataclass(frozen=True)
class LeaderTiming:
    """How long a lease lasts, how often the leader renews it and how often a failed call is retried."""

    lease_duration_s: float = 15.0
    renew_interval_s: float = 5.0
    retry_interval_s: float = 2.0

    def __post_init__(self) -> None:
        if self.retry_interval_s <= 0:
            raise LeaderElectionError(f"--lease-retry must be greater than 0, got {self.retry_interval_s}")
        if self.lease_duration_s < 1 or self.lease_duration_s != int(self.lease_duration_s):
            raise LeaderElectionError(
                f"--lease-duration must be a whole number of seconds >= 1 (the Lease stores seconds), "
                f"got {self.lease_duration_s}"
            )
        if not 0 < self.renew_interval_s < self.renew_deadline_s:
            raise LeaderElectionError(
                f"--lease-renew ({self.renew_interval_s}s) must be greater than 0 and less than "
                f"--lease-duration minus twice --lease-retry ({self.renew_deadline_s}s), so that a renewal "
                "can fail and be retried before the leader has to give up"
            )

    @property
    def renew_deadline_s(self) -> float:
        """The leader stops this long after sending its last successful renewal."""
        return self.lease_duration_s - 2 * self.retry_interval_s


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec and version, as read from the apiserver."""

    holder: str | None
    lease_duration_s: float
    transitions: int
    resource_version: str | None
    acquire_time: dt.datetime | None = None

    @property
    def version(self) -> tuple[str | None, str | None]:
        return (self.holder, self.resource_version)


@dataclass(frozen=True)
class Observation:
    """A Lease version and when (on this process's monotonic clock) it was first seen."""

    record: LeaseRecord
    seen_at: float


def observe(previous: Observation | None, record: LeaseRecord, now: float) -> Observation:
    """Keep the first-seen time while the Lease is unchanged; restart it when the holder renews."""
    if previous is not None and previous.record.version == record.version:
        return previous
    return Observation(record, now)


def may_acquire(observation: Observation | None, identity: str, now: float) -> bool:
    """Whether `identity` may write itself as holder: no Lease yet, nobody holds it, it is ours,
    or its holder has been silent for a whole lease duration as this process measures it."""
    if observation is None:
        return True
    record = observation.record
    if not record.holder or record.holder == identity:
        return True
    return now - observation.seen_at >= record.lease_duration_s


def must_give_up(last_renewed_at: float, now: float, timing: LeaderTiming) -> bool:
    """The leader stops once no renewal sent in the last `renew_deadline_s` succeeded."""
    return now - last_renewed_at >= timing.renew_deadline_s


def identity_for(pod_name: str | None) -> str:
    """The pod's name (downward API) and a random suffix: a restarted container is a new candidate."""
    return f"{pod_name or socket.gethostname()}-{secrets.token_hex(3)}"


def _now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _micro_time(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseLock:
    """Reads and compare-and-swaps one Lease (server errors surface as ApiException)."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str, request_timeout_s: float) -> None:
        self.api = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.request_timeout_s = request_timeout_s

    def get(self) -> LeaseRecord | None:
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.request_timeout_s)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        spec = lease.spec
        return LeaseRecord(
            holder=spec.holder_identity or None,
            lease_duration_s=float(spec.lease_duration_seconds or 0),
            transitions=int(spec.lease_transitions or 0),
            resource_version=lease.metadata.resource_version,
            acquire_time=spec.acquire_time,
        )

    def write(self, current: LeaseRecord | None, holder: str, duration_s: float) -> LeaseRecord:
        """Write `holder` (or '' to release) over `current`; 409 if the Lease changed meanwhile."""
        now = _now_utc()
        taking_over = current is None or current.holder != holder
        acquired = now if taking_over or current is None or current.acquire_time is None else current.acquire_time
        transitions = (current.transitions if current else 0) + (1 if current and taking_over and holder else 0)
        spec = {
            "holderIdentity": holder or None,
            "leaseDurationSeconds": int(duration_s),
            "acquireTime": _micro_time(acquired) if holder else None,
            "renewTime": _micro_time(now),
            "leaseTransitions": transitions,
        }
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}
        if current is None:
            lease = self.api.create_namespaced_lease(self.namespace, body, _request_timeout=self.request_timeout_s)
        else:
            metadata["resourceVersion"] = current.resource_version
            lease = self.api.replace_namespaced_lease(
                self.name, self.namespace, body, _request_timeout=self.request_timeout_s
            )
        return LeaseRecord(holder or None, duration_s, transitions, lease.metadata.resource_version, acquired)


class LeaderElector:
    """One candidate: campaign until leader, renew while leading, release on a clean stop.

    `on_lost` runs (from the renewing thread) when the leader could not renew in time; the
    operator's is `os._exit`, because handlers must not act one moment longer than the Lease
    is ours."""

    def __init__(
        self,
        lock: LeaseLock,
        identity: str,
        timing: LeaderTiming,
        on_lost: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lock = lock
        self.identity = identity
        self.timing = timing
        self.on_lost = on_lost
        self.clock = clock
        self.observation: Observation | None = None
        self.leading = False
        self.last_renewed_at = 0.0
        #: when the campaign loop last finished an attempt (a standby's liveness)
        self.last_attempt_at = clock()
        self._stop = threading.Event()
        self._lost_lock = threading.Lock()
        self._renewer: threading.Thread | None = None

    # --- one attempt -------------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One round trip: read the Lease, write ourselves as holder if we may. True: we lead."""
        sent_at = self.clock()
        current = self.lock.get()
        if current is not None:
            self.observation = observe(self.observation, current, self.clock())
        if not may_acquire(self.observation if current is not None else None, self.identity, self.clock()):
            return False
        try:
            written = self.lock.write(current, self.identity, self.timing.lease_duration_s)
        except ApiException as err:
            if err.status == 409:  # another candidate wrote first, or the holder renewed
                return False
            raise
        self.observation = Observation(written, self.clock())
        self.last_renewed_at = sent_at
        return True

    # --- phases --------------------------------------------------------------------------------

    def campaign(self, stop: threading.Event) -> bool:
        """Block until this candidate leads (True) or `stop` is set (False)."""
        log.info("leader election: %s campaigning for Lease %s/%s", self.identity, self.lock.namespace, self.lock.name)
        while not stop.is_set():
            try:
                if self.try_acquire_or_renew():
                    self.leading = True
                    log.info("leader election: %s is the leader", self.identity)
                    return True
            except Exception as err:  # the apiserver may be briefly away; keep trying
                log.warning("leader election: attempt failed: %s", err)
            self.last_attempt_at = self.clock()
            holder = self.observation.record.holder if self.observation else None
            log.debug("leader election: waiting; holder %s", holder)
            stop.wait(self.timing.retry_interval_s)
        return False

    def keep_renewing(self) -> None:
        """Renew in a background thread until `stop_renewing()`; call `on_lost` past the deadline."""
        self._renewer = threading.Thread(target=self._renew_loop, name="lease-renewer", daemon=True)
        self._renewer.start()
        threading.Thread(target=self._watchdog, name="lease-watchdog", daemon=True).start()

    def _renew_loop(self) -> None:
        while not self._stop.is_set():
            try:
                renewed = self.try_acquire_or_renew()
            except Exception as err:
                log.warning("leader election: renewal failed: %s", err)
                renewed = False
            if not renewed:
                holder = self.observation.record.holder if self.observation else None
                if holder not in (None, self.identity):  # taken over: we were too late
                    self._lose(f"Lease {self.lock.namespace}/{self.lock.name} is held by {holder}")
                    return
                log.warning("leader election: renewal refused or failed; retrying")
            self._stop.wait(self.timing.renew_interval_s if renewed else self.timing.retry_interval_s)

    def _watchdog(self) -> None:
        # Separate from the renew loop so that a hung request cannot delay giving up.
        while not self._stop.wait(0.2):
            if self.leading and must_give_up(self.last_renewed_at, self.clock(), self.timing):
                self._lose(f"no renewal of Lease {self.lock.namespace}/{self.lock.name} succeeded "
                           f"within {self.timing.renew_deadline_s:.0f}s")
                return

    def _lose(self, why: str) -> None:
        with self._lost_lock:
            if not self.leading:
                return
            self.leading = False
        log.critical("leader election: %s lost leadership (%s); stopping", self.identity, why)
        self.on_lost()

    def stop_renewing(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=self.timing.retry_interval_s + 1)

    def release(self) -> bool:
        """Clear the holder if it is still us, so that a standby takes over at once."""
        if not self.leading:
            return False
        self.leading = False
        try:
            current = self.lock.get()
            if current is None or current.holder != self.identity:
                return False
            self.lock.write(current, "", 1)
        except Exception as err:  # the standby then waits out the lease
            log.warning("leader election: could not release the Lease: %s", err)
            return False
        log.info("leader election: %s released Lease %s/%s", self.identity, self.lock.namespace, self.lock.name)
        return True


def lease_namespace(explicit: str | None) -> str:
    """The Lease lives in the operator's own namespace: the flag, or the pod's (downward API)."""
    namespace = explicit or os.environ.get("POD_NAMESPACE")
    if not namespace:
        raise LeaderElectionError(
            "leader election needs the Lease's namespace: set POD_NAMESPACE (the chart sets it from the "
            "downward API) or --lease-namespace, or turn it off with --no-leader-election"
        )
    return namespace
