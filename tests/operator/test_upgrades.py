"""Which version an app's driver runs, and when a new one is refused or rolled back
(eddy_operator.upgrades): pure decisions over what the operator observed."""

from __future__ import annotations

import pytest

from eddy_operator.upgrades import (
    CRASH_RESTARTS,
    DriverSeen,
    Rejection,
    RejectionKind,
    Version,
    VersionBook,
    judge,
)

pytestmark = pytest.mark.unit

OLD = Version("aaaa", {"image": "eddy:1"})
NEW = Version("bbbb", {"image": "eddy:2"})
NOW = "2026-11-27T00:00:00Z"


def seen(hash_: str | None = "bbbb", *, ready: bool = False, restarts: int = 0, age_s: float = 10.0,
         running_batches: bool = False) -> DriverSeen:
    return DriverSeen(hash_, ready, restarts, age_s, running_batches)


def verdict(book: VersionBook, driver: DriverSeen | None, gate: dict[str, object] | None = None, *,
            rollback: bool = True):
    return judge(book, driver, gate, now=NOW, health_timeout_s=120.0, rollback=rollback)


def test_a_new_version_whose_driver_runs_batches_becomes_the_healthy_one() -> None:
    book = VersionBook(wanted=NEW, healthy=OLD)
    assert verdict(book, seen(ready=True, running_batches=True)).healthy == NEW
    assert verdict(book, seen(ready=True, running_batches=False)).healthy is None
    assert verdict(book, seen("aaaa", ready=True, running_batches=True)).healthy is None  # the old driver still


def test_a_refused_topology_goes_back_to_the_healthy_version_even_without_rollback() -> None:
    book = VersionBook(wanted=NEW, healthy=OLD)
    gate = {"configHash": "bbbb", "allowed": False, "reasons": ["store 'counts': value serde int64 -> json"]}
    v = verdict(book, seen(restarts=1), gate, rollback=False)
    assert v.rejection == Rejection(RejectionKind.REFUSED, "store 'counts': value serde int64 -> json", NOW, "aaaa")
    rejected = VersionBook(wanted=NEW, healthy=OLD, rejected={"bbbb": v.rejection})
    assert rejected.to_apply() == OLD
    # another version's verdict says nothing of this one
    assert verdict(book, seen(), {**gate, "configHash": "cccc"}).rejection is None


def test_a_crash_looping_or_slow_new_version_fails_its_health_gate_and_is_rolled_back() -> None:
    book = VersionBook(wanted=NEW, healthy=OLD)
    crash = verdict(book, seen(restarts=CRASH_RESTARTS)).rejection
    assert crash is not None and crash.kind == RejectionKind.FAILED and crash.rolled_back_to == "aaaa"
    slow = verdict(book, seen(age_s=121.0, ready=True)).rejection
    assert slow is not None and "healthTimeout" in slow.reason
    assert verdict(book, seen(age_s=60.0, restarts=CRASH_RESTARTS - 1)).rejection is None


def test_without_rollback_a_failed_version_is_recorded_but_kept() -> None:
    book = VersionBook(wanted=NEW, healthy=OLD)
    failed = verdict(book, seen(restarts=5), rollback=False).rejection
    assert failed is not None and failed.rolled_back_to is None
    assert VersionBook(wanted=NEW, healthy=OLD, rejected={"bbbb": failed}).to_apply() == NEW


def test_a_rejected_version_is_not_tried_again_until_the_spec_changes() -> None:
    rejection = Rejection(RejectionKind.FAILED, "crash", NOW, "aaaa")
    book = VersionBook(wanted=NEW, healthy=OLD, rejected={"bbbb": rejection})
    assert verdict(book, seen(restarts=9)) == verdict(book, None)  # nothing more to say
    assert book.to_apply() == OLD
    newer = Version("cccc", {"image": "eddy:3"})
    assert book.with_wanted(newer).to_apply() == newer


def test_a_restart_of_the_healthy_version_is_not_an_upgrade_to_judge() -> None:
    book = VersionBook(wanted=OLD, healthy=OLD)
    assert verdict(book, seen("aaaa", restarts=7, age_s=999.0)).rejection is None


def test_the_book_round_trips_through_its_configmap_data() -> None:
    book = VersionBook(wanted=NEW, healthy=OLD,
                       rejected={"cccc": Rejection(RejectionKind.REFUSED, "store renamed", NOW, "aaaa")})
    assert VersionBook.from_data(book.to_data()) == book
    assert VersionBook.from_data(None) == VersionBook()
