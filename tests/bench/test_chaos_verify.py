"""The fault campaign's verifier (bench/chaos_verify.py) catches every way the app's outputs can
be wrong: a join record lost, written twice, altered or made up; a window's count wrong, missing,
stepping back or repeated; a gap in the input. A correct run passes."""

from __future__ import annotations

import json
import struct

import pytest

from bench.chaos_verify import Event, Record, Verdict, expected_enriched, verify, windowed_key

pytestmark = pytest.mark.unit

WINDOW_MS = 10_000
REGIONS = {"u0": "r0", "u1": "r1", "u2": "r0"}


def events(n: int = 30) -> list[Event]:
    return [Event(seq, f"u{seq % 3}", seq % 7, 1_000_000 + seq * 1_000) for seq in range(n)]


def enriched(evs: list[Event]) -> list[Record]:
    return [Record(0, i, e.user.encode(), json.dumps(expected_enriched(e, REGIONS[e.user])).encode(), e.timestamp)
            for i, e in enumerate(evs)]


def window_updates(evs: list[Event]) -> list[Record]:
    """Each count written as it grows, one update per event, as the app writes them."""
    counts: dict[bytes, int] = {}
    out = []
    for i, e in enumerate(evs):
        key = windowed_key(REGIONS[e.user], e.timestamp - e.timestamp % WINDOW_MS)
        counts[key] = counts.get(key, 0) + 1
        out.append(Record(0, i, key, struct.pack(">q", counts[key]), e.timestamp))
    return out


def check(evs: list[Event], joined: list[Record], windows: list[Record], sent: int | None = None) -> Verdict:
    return verify(evs, REGIONS, len(evs) if sent is None else sent, joined, windows, WINDOW_MS)


def test_a_correct_run_passes() -> None:
    evs = events()
    verdict = check(evs, enriched(evs), window_updates(evs))
    assert verdict.ok, verdict.summary()
    assert (verdict.lost, verdict.duplicated, verdict.window_keys) == (0, 0, 6)


def test_a_lost_join_record_and_its_window_count_are_found() -> None:
    evs = events()
    verdict = check(evs, enriched(evs)[:-1], window_updates(evs[:-1]))
    assert not verdict.ok
    assert verdict.joined_missing == 1 and verdict.windows_wrong == 1 and verdict.lost == 2
    assert verdict.examples["join: missing"] == ["seq 29"]


def test_a_join_record_written_twice_is_a_duplicate() -> None:
    evs = events()
    joined = enriched(evs)
    verdict = check(evs, [*joined, Record(1, 0, joined[4].key, joined[4].value, 0)], window_updates(evs))
    assert (verdict.ok, verdict.joined_duplicated, verdict.duplicated) == (False, 1, 1)


def test_an_altered_or_unknown_join_record_is_found() -> None:
    evs = events()
    joined = enriched(evs)
    altered = Record(0, 3, b"u0", json.dumps({**json.loads(joined[3].value or b""), "table_value": "r9"}).encode(), 0)
    unknown = Record(0, 99, b"u0", json.dumps(expected_enriched(Event(999, "u0", 1, 0), "r0")).encode(), 0)
    verdict = check(evs, [*joined[:3], altered, *joined[4:], unknown], window_updates(evs))
    assert (verdict.joined_wrong, verdict.joined_unexpected, verdict.ok) == (1, 1, False)


def test_a_count_counted_twice_steps_out_of_order_and_ends_wrong() -> None:
    evs = events()
    windows = window_updates(evs)
    replayed = [*windows, *[Record(0, 100 + i, r.key, r.value, 0) for i, r in enumerate(windows[-2:])]]
    verdict = check(evs, enriched(evs), replayed)
    assert verdict.windows_not_monotonic >= 1 and not verdict.ok


def test_a_repeated_count_is_not_an_increase() -> None:
    evs = events()
    windows = window_updates(evs)
    repeated = [*windows, Record(0, 100, windows[-1].key, windows[-1].value, 0)]
    verdict = check(evs, enriched(evs), repeated)
    assert (verdict.windows_not_monotonic, verdict.windows_wrong, verdict.ok) == (1, 0, False)


def test_a_missing_or_made_up_window_is_found() -> None:
    evs = events()
    windows = [r for r in window_updates(evs) if r.key != windowed_key("r1", 1_000_000)]
    made_up = Record(0, 500, windowed_key("r7", 0), struct.pack(">q", 1), 0)
    verdict = check(evs, enriched(evs), [*windows, made_up])
    assert (verdict.windows_missing, verdict.windows_unexpected, verdict.ok) == (1, 1, False)


def test_a_gap_in_the_input_fails_the_run_as_the_campaign_s_own_defect() -> None:
    evs = events()
    verdict = check(evs, enriched(evs), window_updates(evs), sent=len(evs) + 2)
    assert verdict.input_gaps == [30, 31] and not verdict.ok


def test_aborted_records_are_reported_apart_and_do_not_fail_the_run() -> None:
    evs = events()
    verdict = verify(evs, REGIONS, len(evs), enriched(evs), window_updates(evs), WINDOW_MS,
                     aborted={"enriched": 12})
    assert verdict.ok and verdict.aborted == {"enriched": 12}
    assert "aborted records (read_uncommitted only): {'enriched': 12}" in verdict.summary()


def test_a_transaction_left_open_fails_the_run() -> None:
    evs = events()
    verdict = verify(evs, REGIONS, len(evs), enriched(evs), window_updates(evs), WINDOW_MS,
                     open_transactions=["windows"])
    assert not verdict.ok
