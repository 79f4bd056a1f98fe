"""Nexmark's expected outputs, computed by a plain program over the generated events.

The events are the generator's (`bench/nexmark/run.sh generate --jsonl FILE`): every person,
auction and bid in generation order, which is event-time order (Beam's generator with one
generator and no out-of-order groups makes timestamps that never decrease). Every system's output
topic is read back and turned into the same shape (`observed`), then compared with `expected`:
each query's output is a multiset of records (q0-q3, q8) or the newest value per key (q4, q5, q7,
updating aggregations whose last update per category or window is the result).

The queries, as Beam's Nexmark suite defines them (its default settings: 10 s windows, 5 s
period, auction skip 123), with the semantics every system here is written to:

- q0 pass-through: every bid, unchanged.
- q1 currency conversion: every bid with its price in euros, ``price * 89 // 100`` (Beam's
  ``Query1``, integer arithmetic).
- q2 selection: ``(auction, price)`` of the bids whose auction id is a multiple of 123.
- q3 local item suggestion: ``(name, city, state, auction id)`` for each auction of category 10
  whose seller is a person in OR, ID or CA. A stream-table join: an auction meets its seller as
  of its own timestamp (a person with the same timestamp comes first, as the generator makes
  them). Beam's ``Query3`` also keeps unmatched auctions until their seller comes: those rows
  (`late_sellers`) may appear, once each, but are not required.
- q4 average price per category, as Flink's and RisingWave's Nexmark SQL state it (no window):
  per auction, the highest price of its valid bids (``auction.dateTime <= bid.dateTime <=
  auction.expires``); per category, the sum and count of those highest prices over its auctions
  with a valid bid, and ``avg = sum // count``. An updating result: the last record per category.
- q5 hot items: bids counted per auction in hopping windows of 10 s every 5 s (``[start, start
  + 10 s)``, starts at multiples of 5 s since the epoch); per window, the largest count and the
  auctions that have it (sorted). No bid is late: each topic partition is in event-time order.
- q7 highest bid: per tumbling window of 10 s, the bid with the highest price (ties: the later
  ``dateTime``, then the larger bidder, then the larger auction: a total order, so the result does
  not depend on the order bids are combined in).
- q8 new users: ``(person id, name, auction reserve)`` for each person and each auction they sell
  whose timestamps fall in the same tumbling 10 s window (Beam's ``Query8``).

Run as a script: ``python nexmark_reference.py EVENTS.jsonl`` prints each query's output size.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

WINDOW_MS = 10_000
PERIOD_MS = 5_000
AUCTION_SKIP = 123
LOCAL_STATES = ("OR", "ID", "CA")
LOCAL_CATEGORY = 10
QUERIES = ("q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8")
#: queries whose output is the newest value per key (a window; q4: a category), not a multiset of records
LATEST_PER_KEY = ("q4", "q5", "q7")


@dataclass(frozen=True)
class Event:
    kind: str  # person, auction, bid
    key: str
    timestamp: int
    value: dict[str, Any]


def read_events(path: str) -> list[Event]:
    with open(path, encoding="utf-8") as f:
        return [Event(e["kind"], e["key"], e["timestamp"], e["value"]) for e in map(json.loads, f)]


def euros(price: int) -> int:
    return price * 89 // 100


def tumbling_start(ts: int) -> int:
    return ts - ts % WINDOW_MS


def hopping_starts(ts: int) -> list[int]:
    last = ts - ts % PERIOD_MS
    return [s for s in range(last - WINDOW_MS + PERIOD_MS, last + 1, PERIOD_MS) if s >= 0]


def highest(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """q7's reducer: the higher bid in a total order (price, dateTime, bidder, auction)."""
    def rank(x: dict[str, Any]) -> tuple[int, int, int, int]:
        return int(x["price"]), int(x["dateTime"]), int(x["bidder"]), int(x["auction"])
    return a if rank(a) >= rank(b) else b


# -- each query's output, in the shape `observed` reads back ------------------------------------


def _bid_row(b: dict[str, Any], price: int | None = None) -> tuple[int, int, int, int]:
    return int(b["auction"]), int(b["bidder"]), int(b["price"] if price is None else price), int(b["dateTime"])


@dataclass
class Expected:
    multisets: dict[str, Counter[Any]] = field(default_factory=dict)
    latest: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: q3 rows of auctions whose seller (in a local state) comes only after them (Beam's generator
    #: may pick a seller up to 10 persons ahead): Beam's full join emits them; a stream-table join
    #: emits them only if it read the person before the auction, which depends on how far one
    #: input ran ahead of the other. They are allowed, at most once each, not required.
    late_sellers: Counter[Any] = field(default_factory=Counter)

    def size(self, query: str) -> int:
        return sum(self.multisets[query].values()) if query in self.multisets else len(self.latest[query])


def expected(events: Iterable[Event]) -> Expected:
    out = Expected(multisets={q: Counter() for q in ("q0", "q1", "q2", "q3", "q8")},
                   latest={"q4": {}, "q5": {}, "q7": {}})
    m = out.multisets
    persons: dict[int, dict[str, Any]] = {}
    waiting: list[dict[str, Any]] = []  # q3 auctions whose seller is not known yet
    hop_counts: Counter[tuple[int, int]] = Counter()
    highest_bids: dict[str, dict[str, Any]] = {}
    persons_by_window: dict[tuple[int, int], list[dict[str, Any]]] = {}
    auctions_by_window: dict[tuple[int, int], list[dict[str, Any]]] = {}
    auction_of: dict[int, dict[str, Any]] = {}
    bids_of: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        v = e.value
        if e.kind == "person":
            persons[int(v["id"])] = v
            persons_by_window.setdefault((int(v["id"]), tumbling_start(e.timestamp)), []).append(v)
        elif e.kind == "auction":
            if int(v["category"]) == LOCAL_CATEGORY:
                seller = persons.get(int(v["seller"]))
                if seller is None:
                    waiting.append(v)
                elif seller["state"] in LOCAL_STATES:
                    m["q3"][(seller["name"], seller["city"], seller["state"], int(v["id"]))] += 1
            auctions_by_window.setdefault((int(v["seller"]), tumbling_start(e.timestamp)), []).append(v)
            auction_of[int(v["id"])] = v
        else:
            bids_of.setdefault(int(v["auction"]), []).append(v)
            m["q0"][_bid_row(v)] += 1
            m["q1"][_bid_row(v, euros(int(v["price"])))] += 1
            if int(v["auction"]) % AUCTION_SKIP == 0:
                m["q2"][(int(v["auction"]), int(v["price"]))] += 1
            for start in hopping_starts(e.timestamp):
                hop_counts[(start, int(v["auction"]))] += 1
            window = str(tumbling_start(e.timestamp))
            best = highest_bids.get(window)
            highest_bids[window] = highest(best, v) if best else v
    out.latest["q7"] = {w: _bid_row(b) for w, b in highest_bids.items()}
    for a in waiting:
        seller = persons.get(int(a["seller"]))
        if seller is not None and seller["state"] in LOCAL_STATES:
            out.late_sellers[(seller["name"], seller["city"], seller["state"], int(a["id"]))] += 1
    hot: dict[str, tuple[int, list[int]]] = {}
    for (start, auction), n in hop_counts.items():
        count, auctions = hot.get(str(start), (0, []))
        if n > count:
            hot[str(start)] = (n, [auction])
        elif n == count:
            auctions.append(auction)
    out.latest["q5"] = {w: (n, tuple(sorted(a))) for w, (n, a) in hot.items()}
    out.latest["q4"] = category_averages(auction_of, bids_of)
    for key, ps in persons_by_window.items():
        for p in ps:
            for a in auctions_by_window.get(key, ()):
                m["q8"][(int(p["id"]), p["name"], int(a["reserve"]))] += 1
    return out


def category_averages(auctions: dict[int, dict[str, Any]], bids_of: dict[int, list[dict[str, Any]]]
                      ) -> dict[str, tuple[int, int, int]]:
    """q4: category -> (sum, count, avg) of its auctions' highest valid bid prices."""
    totals: dict[str, tuple[int, int]] = {}
    for auction_id, a in auctions.items():
        valid = [int(b["price"]) for b in bids_of.get(auction_id, ())
                 if int(a["dateTime"]) <= int(b["dateTime"]) <= int(a["expires"])]
        if valid:
            s, n = totals.get(str(int(a["category"])), (0, 0))
            totals[str(int(a["category"]))] = (s + max(valid), n + 1)
    return {c: (s, n, s // n) for c, (s, n) in totals.items()}


# -- a system's output topic, read back ------------------------------------------------------------


def _json(raw: bytes | str) -> Any:
    value = json.loads(raw)
    # A JSON value written as a JSON string (a system that serialized twice) is read through.
    return json.loads(value) if isinstance(value, str) else value


def observed_row(query: str, key: bytes | None, value: bytes) -> tuple[str | None, Any]:
    """One output record as (key, row) in the reference's shape. The windowed queries' results
    name their window in the value (``"window"``: its start, ms), whatever each system's key."""
    k = key.decode(errors="replace") if key is not None else None
    v = _json(value)
    if query == "q4":
        return str(int(v["category"])), (int(v["sum"]), int(v["count"]), int(v["avg"]))
    if query in LATEST_PER_KEY:
        k = str(int(v["window"]))
    if query in ("q0", "q1", "q7"):
        return k, _bid_row(v)
    if query == "q2":
        return k, (int(v["auction"]), int(v["price"]))
    if query == "q3":
        return k, (v["name"], v["city"], v["state"], int(v["id"]))
    if query == "q5":
        return k, (int(v["count"]), tuple(sorted(int(a) for a in v["auctions"])))
    if query == "q8":
        return k, (int(v["id"]), v["name"], int(v["reserve"]))
    raise ValueError(f"unknown query {query}")


def errors(query: str, want: Expected, records: Iterable[tuple[bytes | None, bytes]], limit: int = 5) -> list[str]:
    """How a system's output records differ from the reference (a few examples; empty if equal)."""
    rows = (observed_row(query, k, v) for k, v in records)
    if query in LATEST_PER_KEY:
        got: dict[str | None, Any] = {}
        for k, row in rows:
            got[k] = row
        exp = want.latest[query]
        what = "category" if query == "q4" else "window"
        out = [f"{what} {w}: {got.get(w)} != {r}" for w, r in exp.items() if got.get(w) != r]
        out += [f"{what} {w}: {r} (not expected)" for w, r in got.items() if w not in exp]
        return _few(out, limit)
    counted = Counter(row for _, row in rows)
    exp_counts = want.multisets[query]
    missing = exp_counts - counted
    extra = counted - exp_counts
    if query == "q3":
        extra = extra - want.late_sellers
    out = [f"missing {n}x {r}" for r, n in missing.items()] + [f"extra {n}x {r}" for r, n in extra.items()]
    if out:
        out.insert(0, f"{sum(missing.values())} records missing, {sum(extra.values())} extra "
                      f"(of {sum(exp_counts.values())} expected)")
    return _few(out, limit)


def _few(lines: list[str], limit: int) -> list[str]:
    return lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])


def main(argv: list[str]) -> int:
    want = expected(read_events(argv[1]))
    for q in QUERIES:
        print(f"{q}: {want.size(q)} records")
    print(f"q3 auctions whose seller came later (allowed, not required): {sum(want.late_sellers.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
