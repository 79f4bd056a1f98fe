"""Leader election: the pure decisions (when a lease is free, when the leader must stop), then the
Lease protocol against the real apiserver (two candidates, takeover, release, fencing)."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes.client.exceptions import ConflictException

from eddy_operator.leader import (
    LeaderElectionError,
    LeaderElector,
    LeaderTiming,
    LeaseLock,
    LeaseRecord,
    Observation,
    identity_for,
    lease_namespace,
    may_acquire,
    must_give_up,
    observe,
)

TIMING = LeaderTiming(lease_duration_s=15, renew_interval_s=5, retry_interval_s=2)


def record(holder: str | None, rv: str = "1", duration: float = 15) -> LeaseRecord:
    return LeaseRecord(holder=holder, lease_duration_s=duration, transitions=0, resource_version=rv)


# --- pure decisions ----------------------------------------------------------------------------


@pytest.mark.unit

def take_over(lock, holder: str, duration_s: float) -> None:
    """Write `holder` into the Lease as an intruder would; a renewal landing between our read and
    our write makes the apiserver refuse it (409), so read again and retry."""
    for _ in range(20):
        current = lock.get()
        assert current is not None
        try:
            lock.write(current, holder, duration_s)
            return
        except ConflictException:
            continue
    raise AssertionError("20 takeovers of the Lease in a row lost the race to the leader's renewals")

def test_a_held_lease_is_free_only_after_a_whole_duration_unchanged_on_the_candidates_clock():
    seen = observe(None, record("a", "7"), now=100.0)
    assert not may_acquire(seen, "b", now=100.0)
    assert not may_acquire(seen, "b", now=114.9)
    # the same version read again later keeps the first-seen time
    seen = observe(seen, record("a", "7"), now=110.0)
    assert seen.seen_at == 100.0
    assert may_acquire(seen, "b", now=115.0)
    # a renewal (new resourceVersion) restarts the wait
    seen = observe(seen, record("a", "8"), now=116.0)
    assert not may_acquire(seen, "b", now=130.9)
    assert may_acquire(seen, "b", now=131.0)


@pytest.mark.unit
def test_the_holders_own_lease_an_empty_holder_and_no_lease_may_be_taken_at_once():
    assert may_acquire(None, "b", now=0.0)
    assert may_acquire(Observation(record(None), 0.0), "b", now=0.0)
    assert may_acquire(Observation(record("b"), 0.0), "b", now=0.0)


@pytest.mark.unit
def test_the_holders_announced_duration_counts_not_the_candidates_own():
    seen = Observation(record("a", duration=60), 0.0)
    assert not may_acquire(seen, "b", now=59.0)
    assert may_acquire(seen, "b", now=60.0)


@pytest.mark.unit
def test_the_leader_gives_up_two_retries_before_any_candidate_could_take_over():
    assert TIMING.renew_deadline_s == 11.0
    assert not must_give_up(last_renewed_at=100.0, now=110.9, timing=TIMING)
    assert must_give_up(last_renewed_at=100.0, now=111.0, timing=TIMING)
    # a candidate that saw the renewal land (at the earliest when it was sent) waits until 115
    seen = Observation(record("a"), 100.0)
    assert not may_acquire(seen, "b", now=111.0)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"retry_interval_s": 0}, "--lease-retry"),
        ({"lease_duration_s": 7.5}, "--lease-duration"),
        ({"renew_interval_s": 11}, "--lease-renew"),
        ({"lease_duration_s": 5, "renew_interval_s": 1, "retry_interval_s": 3}, "--lease-renew"),
    ],
)
def test_timings_that_would_let_a_lease_lapse_are_refused_naming_the_flag(kwargs, says):
    with pytest.raises(LeaderElectionError, match=says):
        LeaderTiming(**kwargs)


@pytest.mark.unit
def test_identity_is_the_pod_name_and_a_random_suffix(monkeypatch):
    a, b = identity_for("eddy-operator-7f9c-abcde"), identity_for("eddy-operator-7f9c-abcde")
    assert a.startswith("eddy-operator-7f9c-abcde-") and b.startswith("eddy-operator-7f9c-abcde-")
    assert a != b
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    with pytest.raises(LeaderElectionError, match="POD_NAMESPACE"):
        lease_namespace(None)
    assert lease_namespace("ops") == "ops"


# --- the Lease protocol against the real apiserver ---------------------------------------------

FAST = LeaderTiming(lease_duration_s=3, renew_interval_s=0.5, retry_interval_s=0.5)


def _elector(kube, namespace, identity, lost=None, timing=FAST):
    lock = LeaseLock(kube.api_client(), namespace, "eddy-operator", request_timeout_s=timing.retry_interval_s)
    return LeaderElector(lock, identity, timing, on_lost=lost or (lambda: None))


def _lease(kube, namespace):
    from kubernetes import client

    return client.CoordinationV1Api(kube.api_client()).read_namespaced_lease("eddy-operator", namespace)


@pytest.mark.integration
def test_one_candidate_leads_and_the_other_waits_until_the_leader_goes_silent(kube, namespace):
    a, b = _elector(kube, namespace, "a"), _elector(kube, namespace, "b")
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    lease = _lease(kube, namespace)
    assert lease.spec.holder_identity == "a" and lease.spec.lease_duration_seconds == 3
    # the leader keeps renewing: a whole lease duration later b still may not take it
    t0 = time.monotonic()
    while time.monotonic() - t0 < 4:
        assert a.try_acquire_or_renew() is True
        assert b.try_acquire_or_renew() is False
        time.sleep(0.5)
    # the leader goes silent: b takes over once it has seen no renewal for 3 s, never sooner
    stop = threading.Event()
    t0 = time.monotonic()
    assert b.campaign(stop) is True
    waited = time.monotonic() - t0
    assert 2.5 <= waited <= 3 + 2 * FAST.retry_interval_s + 1, waited
    lease = _lease(kube, namespace)
    assert lease.spec.holder_identity == "b" and lease.spec.lease_transitions == 1
    # the old leader's next renewal is refused: it sees b's lease, not expired
    assert a.try_acquire_or_renew() is False


@pytest.mark.integration
def test_a_released_lease_is_taken_by_the_standby_at_once(kube, namespace):
    a, b = _elector(kube, namespace, "a"), _elector(kube, namespace, "b")
    stop = threading.Event()
    assert a.campaign(stop) is True
    assert b.try_acquire_or_renew() is False
    assert a.release() is True
    assert not _lease(kube, namespace).spec.holder_identity
    t0 = time.monotonic()
    assert b.campaign(stop) is True
    assert time.monotonic() - t0 < 1.0


@pytest.mark.integration
def test_two_candidates_writing_the_same_version_cannot_both_win(kube, namespace):
    a, b = _elector(kube, namespace, "a"), _elector(kube, namespace, "b")
    lock = a.lock
    assert a.campaign(threading.Event()) is True
    assert a.release() is True
    free = lock.get()
    assert free is not None and free.holder is None
    from kubernetes.client.exceptions import ApiException

    lock.write(free, "b", 3)
    with pytest.raises(ApiException) as err:
        lock.write(free, "a", 3)  # the version it read is gone
    assert err.value.status == 409
    assert _lease(kube, namespace).spec.holder_identity == "b"
    assert b.try_acquire_or_renew() is True


@pytest.mark.integration
def test_a_leader_that_finds_the_lease_taken_stops_at_once(kube, namespace):
    lost = threading.Event()
    a = _elector(kube, namespace, "a", lost=lost.set)
    assert a.campaign(threading.Event()) is True
    a.keep_renewing()
    try:
        # as if a's renewals had not landed for a lease duration
        take_over(a.lock, "intruder", 3)
        assert lost.wait(5), "the leader did not stop after its Lease was taken"
        assert not a.leading
    finally:
        a.stop_renewing()
