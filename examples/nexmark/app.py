"""Nexmark's queries (the auction benchmark of Tucker et al., as Beam's suite defines them) in Eddy.

The input is Beam's Nexmark generator's (bench/nexmark/run.sh): JSON persons, auctions and bids
on the topics ``<prefix>-person`` (keyed by person id), ``<prefix>-auction`` (keyed by auction
id) and ``<prefix>-bid`` (keyed by auction id), each record stamped with its event's time, all
with the same partition count. Each query writes ``<output_prefix>-<query>``;
bench/nexmark/nexmark_reference.py states each query's semantics and computes its expected output.

- q0 pass-through, q1 currency conversion, q2 selection: record steps over the bids.
- q3 local item suggestion: auctions of category 10, re-keyed by seller through the topic
  ``<output_prefix>-q3-auctions-by-seller``, joined with the persons table (a stream-table join,
  as of each auction's timestamp) by a joiner that keeps sellers in OR, ID and CA.
- q4 average price per category: auctions and bids merged (one stream keyed by auction id), a
  `process()` step keeping per auction its highest valid bid and forwarding each rise to the
  auction's category with the price it replaces, then per category the sum and count of the
  highest prices, which each rise changes by the difference (what Kafka Streams'
  ``KTable.groupBy`` sends as a subtractor and an adder, here as one record).
- q5 hot items: bids counted per auction in hopping windows (10 s, every 5 s), then re-keyed by
  window to keep, per window, the largest count and the auctions that have it.
- q7 highest bid: bids re-keyed by their tumbling 10 s window, the highest kept per window (an
  aggregate, whose adder takes a batch's bids of a window at once).
- q8 new users: auctions re-keyed by seller through ``<output_prefix>-q8-auctions-by-seller``,
  joined with the persons of the same id within 10 s (a windowed stream-stream join), the pairs
  of the same tumbling window kept.

The topics a query writes and reads back (q3, q8) must exist, with the inputs' partition count,
before the app starts: Eddy has no ``repartition()`` for a stream that is joined after a key
change (bench/README.md, "nexmark.py", lists what Eddy's DSL lacks for Nexmark).

``build(topology, queries="q0,q1,...")`` puts several queries in one app, each source read once
(an app may not read a topic twice with ``stream()``); q5 then re-keys the bids by auction
through a repartition topic, as a stream that feeds several chains must before a stateful step.
q3 and q8 are refused together (see `build`).
"""

from __future__ import annotations

from typing import Any

import orjson

from eddy_runtime.dsl.pipeline import Stream, Topology, hopping, join_windows
from eddy_runtime.dsl.processors import Processor, ProcessorContext, Record

WINDOW_MS = 10_000
AUCTION_SKIP = 123
LOCAL_STATES = frozenset(("OR", "ID", "CA"))
LOCAL_CATEGORY = 10


def dumps(value: Any) -> str:
    """JSON text of `value` (orjson: the fast JSON library a Python user tuning for speed picks, as
    the Kafka Streams program uses Jackson; bench/README.md, "nexmark.py")."""
    return orjson.dumps(value).decode()


def _obj(value: Any) -> Any:
    return orjson.loads(value) if isinstance(value, str | bytes) else value


def to_euros(bid: str) -> str:
    b = orjson.loads(bid)
    b["price"] = b["price"] * 89 // 100
    return dumps(b)


def q0(bids: Stream, output: str) -> None:
    bids.to(output)


def q1(bids: Stream, output: str) -> None:
    bids.map_values(to_euros).to(output)


def q2(bids: Stream, output: str) -> None:
    (bids.filter(lambda auction, bid: int(auction) % AUCTION_SKIP == 0)
         .map_values(lambda bid: dumps({"auction": (b := orjson.loads(bid))["auction"], "price": b["price"]}))
         .to(output))


def q3_rekey(auctions: Stream, by_seller: str) -> None:
    (auctions.filter(lambda key, auction: orjson.loads(auction)["category"] == LOCAL_CATEGORY)
             .select_key(lambda key, auction: str(orjson.loads(auction)["seller"]))
             .to(by_seller))


def q3_join(topology: Topology, by_seller: str, persons_topic: str, output: str) -> None:
    persons = topology.table(persons_topic, value_serde="json", name="q3-persons")
    (topology.stream(by_seller, value_serde="json").join(persons, local_seller)
             .filter(lambda key, row: row is not None)
             .to(output))


def local_seller(auction_text: str, person_text: str) -> str | None:
    """The joiner: (name, city, state, auction id) of a seller in OR, ID or CA; None otherwise."""
    auction, person = _obj(auction_text), _obj(person_text)
    if person["state"] not in LOCAL_STATES:
        return None
    return dumps({"name": person["name"], "city": person["city"], "state": person["state"], "id": auction["id"]})


def q4(auctions: Stream, bids: Stream, output: str) -> None:
    (auctions.merge(bids, name="q4-auctions-and-bids")
             .process(WinningBids, stores=[WinningBids.AUCTIONS, WinningBids.WAITING], name="q4-winning-bids")
             .group_by(lambda category, rise: category, name="q4-categories")
             .aggregate(dict, category_average, name="q4-averages")
             .to(output))


class WinningBids(Processor):
    """q4's first step, keyed by auction id over auctions and bids: each auction's highest valid bid
    (placed from the auction's start to its expiry, both included). Each rise is forwarded as
    ``{"auction", "category", "price", "old"}`` (``old``: the price it replaces, None for the
    auction's first valid bid), keyed by the auction's category, as Kafka Streams' q4 forwards it.
    A bid that comes before its auction (the generator bids up to 10 auctions ahead, and one topic
    may be read ahead of the other) waits in a store of its own until the auction comes, each under
    a key of its own (a list per auction, written again with each bid, would cost a hot auction's
    bids quadratic time when a batch brings many of its bids before it)."""

    AUCTIONS = "q4-auctions"  # auction id -> {category, dateTime, expires, price}
    WAITING = ("q4-waiting-bids", "string", "json")  # "<auction id>:<offset>" -> [price, dateTime]

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.auctions = context.store(self.AUCTIONS)
        self.waiting = context.store(self.WAITING[0])

    def process(self, record: Record) -> None:
        event = _obj(record.value)
        if "expires" in event:
            auction = {"category": event["category"], "dateTime": event["dateTime"], "expires": event["expires"],
                       "price": None}
            waiting = list(self.waiting.prefix(f"{record.key}:"))
            for key, (price, time) in waiting:
                if raises(auction, price, time):
                    auction["price"] = price
                self.waiting.delete(key)
            self.auctions.put(record.key, auction)
            if auction["price"] is not None:
                self._rise(record.key, auction, None)
            return
        auction = self.auctions.get(record.key)
        if auction is None:
            self.waiting.put(f"{record.key}:{record.offset}", [event["price"], event["dateTime"]])
        elif raises(auction, event["price"], event["dateTime"]):
            old, auction["price"] = auction["price"], event["price"]
            self.auctions.put(record.key, auction)
            self._rise(record.key, auction, old)

    def _rise(self, key: str, auction: dict[str, Any], old: int | None) -> None:
        self.context.forward(str(auction["category"]), dumps({
            "auction": int(key), "category": auction["category"], "price": auction["price"], "old": old}))


def raises(auction: dict[str, Any], price: int, time: int) -> bool:
    """Whether a bid of `price` placed at `time` is valid for `auction` (from its start to its
    expiry, both included) and above its highest so far."""
    return auction["dateTime"] <= time <= auction["expires"] and (auction["price"] is None or price > auction["price"])


def category_average(category: str, values: dict[str, list[Any]], totals: dict[str, Any]) -> dict[str, Any]:
    """q4's second step, per category: the sum and count of its auctions' highest bids, changed by
    each rise's difference (a rise with no ``old`` is a new auction), and their average."""
    total, count = totals.get("sum", 0), totals.get("count", 0)
    for text in values["value"]:
        rise = _obj(text)
        total += rise["price"] - (rise["old"] or 0)
        count += rise["old"] is None
    return {"category": int(category), "sum": total, "count": count, "avg": total // count}


def q5(bids: Stream, output: str, grace: str, shared: bool = False) -> None:
    # Bids are keyed by auction already; a stream that also feeds other queries' chains must go
    # through a repartition topic before a stateful step (the compiler's rule for branches).
    by_auction = bids.group_by(lambda auction, bid: auction, name="q5-by-auction") if shared else bids.group_by_key()
    counts = by_auction.windowed_by(hopping("10s", "5s", grace=grace)).count(name="q5-bids-per-window")
    (counts.to_stream()
           .map(lambda auction, n: (auction, dumps({"auction": int(auction), "count": n})))
           .group_by("window_start", name="q5-windows", key_serde="int64")
           .aggregate(dict, hottest, name="q5-hottest")
           .to(output))


def hottest(window: int, values: dict[str, list[Any]], hot: dict[str, Any]) -> dict[str, Any]:
    """The largest count of the window and the auctions that have it. An auction's count in a
    window only grows, so its newest count replaces nothing that could still win."""
    count, auctions = hot.get("count", 0), set(hot.get("auctions", ()))
    for text in values["value"]:
        update = _obj(text)
        if update["count"] > count:
            count, auctions = update["count"], {update["auction"]}
        elif update["count"] == count:
            auctions.add(update["auction"])
    return {"window": int(window), "count": count, "auctions": sorted(auctions)}


def q7(bids: Stream, output: str) -> None:
    (bids.map(ranked_in_window)
         .group_by("key", name="q7-windows")
         .aggregate(list, highest, name="q7-highest")
         .to_stream()
         .map_values(lambda best: dumps({
             "window": window_of(best), "price": (r := _obj(best))[0], "dateTime": r[1], "bidder": r[2],
             "auction": r[3]}))
         .to(output))


def ranked_in_window(auction: str, bid: str) -> tuple[str, str]:
    """(the bid's tumbling window, the bid as the JSON list [price, dateTime, bidder, auction]):
    compared as a list, the higher bid is the higher price, then the later, then the larger bidder
    and auction ids. One parse of the bid for both, as Kafka Streams' q7 maps it."""
    b = orjson.loads(bid)
    time = b["dateTime"]
    return str(time - time % WINDOW_MS), dumps([b["price"], time, b["bidder"], b["auction"]])


def window_of(ranked_bid: Any) -> int:
    time = _obj(ranked_bid)[1]
    return int(time - time % WINDOW_MS)


def highest(window: str, values: dict[str, list[Any]], best: list[Any]) -> list[Any]:
    """The window's highest ranked bid so far: the highest of a batch's bids (each parsed once,
    compared as lists: a total order, so the highest does not depend on the order the bids come
    in) against the one kept (``[]``, the initializer's, before the window's first)."""
    top = max(map(_obj, values["value"]))
    return top if not best or top > best else best


def q8_rekey(auctions: Stream, by_seller: str) -> None:
    auctions.select_key(lambda key, auction: str(orjson.loads(auction)["seller"])).to(by_seller)


def q8_join(topology: Topology, by_seller: str, persons_topic: str, output: str, grace: str) -> None:
    persons = topology.stream(persons_topic, value_serde="json")
    (topology.stream(by_seller, value_serde="json")
             .join(persons, new_user, windows=join_windows("10s", grace), name="q8-new-users")
             .filter(lambda key, row: row is not None)
             .to(output))


def new_user(auction: str, person: str) -> str | None:
    """(person id, name, reserve) when the person and their auction share a tumbling window."""
    a, p = orjson.loads(auction), orjson.loads(person)
    if a["dateTime"] // WINDOW_MS != p["dateTime"] // WINDOW_MS:
        return None
    return dumps({"id": p["id"], "name": p["name"], "reserve": a["reserve"]})


def build(topology: Topology, queries: str = "q1", prefix: str = "nexmark", output_prefix: str = "",
          grace: str = "0s", join_grace: str = "5m") -> None:
    """The `queries` (comma-separated) over ``<prefix>-person``, ``-auction`` and ``-bid``.

    `grace`: late bids in q5's windows (none are: the generator's timestamps never decrease). `join_grace`:
    how far q8's persons may run ahead of the re-keyed auctions (a topic the app itself writes, so
    one input is read behind the other) before an auction is dropped as late.
    """
    wanted = [q.strip() for q in queries.split(",") if q.strip()]
    unknown = set(wanted) - {"q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8"}
    if unknown:
        raise ValueError(f"unknown Nexmark queries {sorted(unknown)}; Eddy has q0, q1, q2, q3, q4, q5, q7, q8")
    if {"q3", "q8"} <= set(wanted):
        # q3 reads the persons as a table and q8 as a windowed join's other stream: in one app the
        # runtime hands q8's task the persons as table updates (a defect: "store 'q8-new-users-other'
        # is not a key-value store"), so they run as two apps.
        raise ValueError("q3 and q8 cannot run in one app yet: run q8 as an app of its own")
    out = output_prefix or prefix
    persons_topic, auctions_topic, bids_topic = f"{prefix}-person", f"{prefix}-auction", f"{prefix}-bid"
    bid_queries = [q for q in wanted if q in ("q0", "q1", "q2", "q4", "q5", "q7")]
    if bid_queries:
        # Read as text: each step parses what it needs (the json serde would parse every record
        # once more, only to check it).
        bids = topology.stream(bids_topic)
        for q in wanted:
            if q == "q0":
                q0(bids, f"{out}-q0")
            elif q == "q1":
                q1(bids, f"{out}-q1")
            elif q == "q2":
                q2(bids, f"{out}-q2")
            elif q == "q5":
                q5(bids, f"{out}-q5", grace, shared=len(bid_queries) > 1)
            elif q == "q7":
                q7(bids, f"{out}-q7")
    if {"q3", "q4", "q8"} & set(wanted):
        auctions = topology.stream(auctions_topic)
        if "q4" in wanted:
            q4(auctions, bids, f"{out}-q4")
        if "q3" in wanted:
            q3_rekey(auctions, f"{out}-q3-auctions-by-seller")
            q3_join(topology, f"{out}-q3-auctions-by-seller", persons_topic, f"{out}-q3")
        if "q8" in wanted:
            q8_rekey(auctions, f"{out}-q8-auctions-by-seller")
            q8_join(topology, f"{out}-q8-auctions-by-seller", persons_topic, f"{out}-q8", join_grace)


#: topics an app of `queries` writes and reads back: they must exist before it starts
def internal_topics(queries: str, output_prefix: str) -> list[str]:
    wanted = {q.strip() for q in queries.split(",")}
    return ([f"{output_prefix}-q3-auctions-by-seller"] if "q3" in wanted else []) + \
        ([f"{output_prefix}-q8-auctions-by-seller"] if "q8" in wanted else [])
