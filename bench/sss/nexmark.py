"""Nexmark's q0, q1, q2, q3, q4, q5, q7 and q8 in Spark Structured Streaming, the peer of bench/kstreams'
NexmarkBench in bench/nexmark.py.

    python bench/sss/nexmark.py --bootstrap H:P --prefix P --output-prefix O --query qN --app-id ID
                                --state-dir DIR [--warmup-events 20000] [--trigger-ms 100]

Reads the topics of bench/nexmark/run.sh (P-person, P-auction, P-bid: JSON values keyed by id)
from the earliest offsets and writes O-qN, which must exist, with the JSON values of
NexmarkBench.java and examples/nexmark/app.py, so that bench/nexmark/nexmark_reference.py checks
it alike. Spark runs as bench/sss/wordcount.py runs it (``spark_session``: ``local[1]``, Spark's
Kafka connector, the RocksDB state store with changelog checkpointing), one shuffle partition per
input partition, ``trigger(processingTime=100 ms)``, checkpoints under DIR.

The queries, written as a Spark user would:

- q0, q1, q2: projections and a filter of the bids.
- q3: an inner stream-stream join of category-10 auctions and local persons on seller = id,
  without a watermark: a seller may be any earlier person, so both sides are kept for good (Kafka
  Streams keeps the persons' table for good). Spark has no stream-table join of two streams, so an
  auction whose seller comes later is joined too: the reference allows those rows, once each.
- q4: auctions and bids (their common columns) in one stream, ``applyInPandasWithState`` per
  auction (``winning_bids``: its highest valid bid; bids that come before their auction wait in
  its state) writing each rise with the price it replaces, then ``groupBy(category)`` summing the
  differences in update mode. The keyed step runs in the function's append mode: Spark refuses an
  aggregation after one in update mode ("applyInPandasWithState in update mode is not supported
  with aggregation"), and two aggregations (the highest bid per auction, then the average) would
  need retractions that Spark does not send.
- q5: ``applyInPandasWithState`` per hopping window (``hottest_auctions``). Counting per (window,
  auction) and then taking the largest count per window is two aggregations, which Spark chains
  only in append mode, where a window is written once the watermark passes it, so the last
  windows of a finite input would never be. The function keeps each window's counts and writes
  the window's largest count and its auctions whenever the window took bids in a batch. (Spark 4's
  ``transformWithStateInPandas`` would do the same, but its Python side needs protobuf, which is
  not among the project's dependencies.)
- q7: ``groupBy(window(10 s)).max(struct(price, dateTime, bidder, auction))`` in update mode: the
  struct compares field by field, which is the reference's total order.
- q8: an inner stream-stream join of persons and auctions on id = seller and their tumbling
  window (``window(10 s)`` on both sides, a join key that lets the watermark clean the state).

q5, q7 and q8 take event time from the events' ``dateTime`` with a watermark ``WATERMARK_DELAY``
behind the newest: Spark keeps one watermark for the query across partitions, where Kafka Streams
keeps a stream time per partition, so the delay is what lets one partition run ahead of another
without the other's bids counting as late. Update mode and the inner joins write results as they
change, not when the watermark passes, so the watermark only bounds the state.

Each output record carries a Kafka header ``ts``: the Kafka timestamp (ms, decimal ASCII) of the
newest input record it came from (the bid; the later of a join's two records; a window's newest
bid), the latency bench/nexmark.py measures from. Spark's Kafka sink writes topic, key, value,
headers and partition, not a record timestamp, so the records' own timestamps are their write
times.

Spark's Kafka sink is at-least-once: a batch re-run after a failure writes its rows again. Its
Kafka source commits no offsets; the harness knows the input is processed when group ID has
committed the end of every input partition, so ``OffsetCommitter`` commits each finished batch's
end offsets to group ID, after the batch's output is written.

Before the measured query, the same query runs to its end over ``--warmup-events`` events of its
own (topics O-warm-in-*, output O-warm-qN) in the same Spark session, as bench/sss/wordcount.py's
warm-up query and Eddy's warm-up app do. Prints "-> RUNNING" on stderr once the measured query is
started, runs until stdin is closed, then stops the query and prints one JSON line on stdout:
``{"query", "seconds", "batches", "max_batch_ms"}`` (from Spark's progress reports: batches run, the
longest). Exit codes: 0 stopped, 1 the query failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.listener import StreamingQueryListener
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.state import GroupState

BENCH = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCH))  # bench/: sss.wordcount's Spark session, throughput.py's topics
from sss.wordcount import input_partitions, spark_session  # noqa: E402
from throughput import create_topics  # noqa: E402

GENERATOR = BENCH / "nexmark" / "run.sh"

PROGRAM = "sss-nexmark"
WINDOW = "10 seconds"
WINDOW_MS = 10_000
PERIOD_MS = 5_000
#: how far the watermark runs behind the newest event time (see the module's docstring)
WATERMARK_DELAY = "10 seconds"
AUCTION_SKIP = 123
LOCAL_STATES = ("OR", "ID", "CA")
LOCAL_CATEGORY = 10
#: events of the warm-up query and their rate in event time (bench/nexmark.py gives Eddy's warm-up
#: app as many, at one event per millisecond)
WARMUP_EVENTS = 20_000
WARMUP_EVENT_RATE = 1_000

#: the generator's JSON (bench/nexmark/src/.../KafkaGenerator.java), per topic
SCHEMAS = {
    "person": "id bigint, name string, emailAddress string, creditCard string, city string, state string, "
              "dateTime bigint, extra string",
    "auction": "id bigint, itemName string, description string, initialBid bigint, reserve bigint, "
               "dateTime bigint, expires bigint, seller bigint, category bigint, extra string",
    "bid": "auction bigint, bidder bigint, price bigint, dateTime bigint, extra string",
}


def log(text: str) -> None:
    print(f"{PROGRAM}: {text}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Plan:
    """A query's output rows (``key`` and ``value`` strings; ``ts_ms``, the Kafka timestamp of the
    newest input record each came from) and the output mode they are written in."""
    rows: DataFrame
    output_mode: str


# -- the inputs ------------------------------------------------------------------------------------


def events(spark: SparkSession, bootstrap: str, topic: str, kind: str) -> DataFrame:
    """One of the generator's topics from its earliest offset: ``key``, ``raw`` (the JSON), ``e``
    (the parsed event), ``ts_ms`` (the record's Kafka timestamp), ``event_time`` (its dateTime)."""
    raw = (spark.readStream.format("kafka")
           .option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic)
           .option("startingOffsets", "earliest")
           .load())
    value = F.col("value").cast("string")
    return raw.select(F.col("key").cast("string").alias("key"), value.alias("raw"),
                      F.from_json(value, SCHEMAS[kind]).alias("e"),
                      F.unix_millis("timestamp").alias("ts_ms")).withColumn(
        "event_time", F.timestamp_millis(F.col("e.dateTime")))


# -- the queries --------------------------------------------------------------------------------------


def q0(bids: DataFrame) -> Plan:
    return Plan(bids.select("key", F.col("raw").alias("value"), "ts_ms"), "append")


def q1(bids: DataFrame) -> Plan:
    euros = F.struct(F.col("e.auction").alias("auction"), F.col("e.bidder").alias("bidder"),
                     F.expr("e.price * 89 div 100").alias("price"), F.col("e.dateTime").alias("dateTime"),
                     F.col("e.extra").alias("extra"))
    return Plan(bids.select("key", F.to_json(euros).alias("value"), "ts_ms"), "append")


def q2(bids: DataFrame) -> Plan:
    chosen = bids.where(F.col("e.auction") % AUCTION_SKIP == 0)
    value = F.to_json(F.struct(F.col("e.auction").alias("auction"), F.col("e.price").alias("price")))
    return Plan(chosen.select("key", value.alias("value"), "ts_ms"), "append")


def q3(persons: DataFrame, auctions: DataFrame) -> Plan:
    local = persons.where(F.col("e.state").isin(*LOCAL_STATES)).select(
        F.col("e.id").alias("person"), F.col("e.name").alias("name"), F.col("e.city").alias("city"),
        F.col("e.state").alias("state"), F.col("ts_ms").alias("person_ts_ms"))
    items = auctions.where(F.col("e.category") == LOCAL_CATEGORY).select(
        F.col("e.id").alias("id"), F.col("e.seller").alias("seller"), F.col("ts_ms").alias("auction_ts_ms"))
    joined = items.join(local, F.col("seller") == F.col("person"), "inner")
    value = F.to_json(F.struct("name", "city", "state", "id"))
    return Plan(joined.select(F.col("seller").cast("string").alias("key"), value.alias("value"),
                              F.greatest("auction_ts_ms", "person_ts_ms").alias("ts_ms")), "append")


def q4(auctions: DataFrame, bids: DataFrame) -> Plan:
    none = F.lit(None).cast("bigint")
    both = auctions.select(F.col("e.id").alias("auction"), F.col("e.category").alias("category"),
                           F.col("e.dateTime").alias("start"), F.col("e.expires").alias("expires"),
                           none.alias("price"), none.alias("time"), "ts_ms").unionByName(
        bids.select(F.col("e.auction").alias("auction"), none.alias("category"), none.alias("start"),
                    none.alias("expires"), F.col("e.price").alias("price"), F.col("e.dateTime").alias("time"), "ts_ms"))
    rises = both.groupBy("auction").applyInPandasWithState(
        winning_bids, RISE_OUTPUT, WINNING_STATE, "append", "NoTimeout")
    totals = rises.groupBy("category").agg(
        F.sum(F.col("price") - F.coalesce("old", F.lit(0))).alias("total"),
        F.sum(F.when(F.col("old").isNull(), 1).otherwise(0)).alias("n"), F.max("ts_ms").alias("ts_ms"))
    value = F.to_json(F.struct("category", F.col("total").alias("sum"), F.col("n").alias("count"),
                               F.expr("total div n").alias("avg")))
    return Plan(totals.select(F.col("category").cast("string").alias("key"), value.alias("value"), "ts_ms"), "update")


def q5(bids: DataFrame) -> Plan:
    # The two hopping windows [start, start + 10 s) a bid falls in; starts are multiples of 5 s.
    last = F.col("e.dateTime") - F.col("e.dateTime") % PERIOD_MS
    per_window = (bids.withWatermark("event_time", WATERMARK_DELAY)
                  .select(F.explode(F.array(last - PERIOD_MS, last)).alias("window"),
                          F.col("e.auction").alias("auction"), "ts_ms", "event_time")
                  .where(F.col("window") >= 0))
    hot = per_window.groupBy("window").applyInPandasWithState(
        hottest_auctions, HOTTEST_OUTPUT, HOTTEST_STATE, "update", "EventTimeTimeout")
    value = F.to_json(F.struct("window", "count", "auctions"))
    return Plan(hot.select(F.col("window").cast("string").alias("key"), value.alias("value"), "ts_ms"), "update")


def q7(bids: DataFrame) -> Plan:
    ranked = F.struct(F.col("e.price").alias("price"), F.col("e.dateTime").alias("dateTime"),
                      F.col("e.bidder").alias("bidder"), F.col("e.auction").alias("auction"))
    best = (bids.withWatermark("event_time", WATERMARK_DELAY)
            .groupBy(F.window("event_time", WINDOW))
            .agg(F.max(ranked).alias("best"), F.max("ts_ms").alias("ts_ms")))
    start = F.unix_millis(F.col("window.start"))
    value = F.to_json(F.struct(start.alias("window"), *(F.col(f"best.{f}").alias(f)
                                                        for f in ("price", "dateTime", "bidder", "auction"))))
    return Plan(best.select(start.cast("string").alias("key"), value.alias("value"), "ts_ms"), "update")


def q8(persons: DataFrame, auctions: DataFrame) -> Plan:
    people = persons.withWatermark("event_time", WATERMARK_DELAY).select(
        F.col("e.id").alias("id"), F.col("e.name").alias("name"),
        F.window("event_time", WINDOW).alias("person_window"), F.col("ts_ms").alias("person_ts_ms"))
    sold = auctions.withWatermark("event_time", WATERMARK_DELAY).select(
        F.col("e.seller").alias("seller"), F.col("e.reserve").alias("reserve"),
        F.window("event_time", WINDOW).alias("auction_window"), F.col("ts_ms").alias("auction_ts_ms"))
    same_window = (F.col("seller") == F.col("id")) & (F.col("auction_window") == F.col("person_window"))
    joined = sold.join(people, same_window, "inner")
    value = F.to_json(F.struct("id", "name", "reserve"))
    return Plan(joined.select(F.col("seller").cast("string").alias("key"), value.alias("value"),
                              F.greatest("auction_ts_ms", "person_ts_ms").alias("ts_ms")), "append")


#: queries over the bids alone, and over the persons and the auctions
BID_QUERIES: dict[str, Callable[[DataFrame], Plan]] = {"q0": q0, "q1": q1, "q2": q2, "q5": q5, "q7": q7}
PERSON_AUCTION_QUERIES: dict[str, Callable[[DataFrame, DataFrame], Plan]] = {"q3": q3, "q8": q8}
AUCTION_BID_QUERIES: dict[str, Callable[[DataFrame, DataFrame], Plan]] = {"q4": q4}
QUERIES = tuple(sorted({*BID_QUERIES, *PERSON_AUCTION_QUERIES, *AUCTION_BID_QUERIES}))

#: q4's per-auction state (the waiting bids' prices and times as int64 bytes, as q5's counts) and
#: its rises
WINNING_STATE = "known boolean, category bigint, start bigint, expires bigint, best bigint, " \
                "waiting_prices binary, waiting_times binary"
RISE_OUTPUT = "auction bigint, category bigint, price bigint, old bigint, ts_ms bigint"


def winning_bids(key: tuple[int], batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """q4 per auction, the function of ``applyInPandasWithState``: the auction (once it came), its
    highest bid placed from its start to its expiry (both included), and the bids that came before
    it. On a batch that raises the highest, one row: the new price and the one it replaces (None:
    the auction's first valid bid), stamped with the batch's newest input of the auction."""
    (auction,) = key
    rows = pd.concat(list(batches), ignore_index=True)
    newest = int(rows["ts_ms"].max())
    known, category, start, expires, best = False, -1, 0, 0, -1
    prices, times = np.empty(0, INT64), np.empty(0, INT64)
    if state.exists:
        known, category, start, expires, best, saved_prices, saved_times = state.get
        prices, times = np.frombuffer(saved_prices, INT64), np.frombuffer(saved_times, INT64)
    came = rows[rows["start"].notna()]
    if not known and len(came):
        known, category, start, expires = True, int(came["category"].iloc[0]), int(came["start"].iloc[0]), \
            int(came["expires"].iloc[0])
    bids = rows[rows["price"].notna()]
    prices = np.concatenate([prices, bids["price"].to_numpy(INT64)])
    times = np.concatenate([times, bids["time"].to_numpy(INT64)])
    old = best
    if known:
        valid = prices[(times >= start) & (times <= expires)]
        if len(valid):
            best = max(best, int(valid.max()))
        prices, times = np.empty(0, INT64), np.empty(0, INT64)
    state.update((known, category, start, expires, best, prices.tobytes(), times.tobytes()))
    if best > old:
        yield pd.DataFrame({"auction": [int(auction)], "category": [category], "price": [best],
                            "old": pd.array([None if old < 0 else old], dtype="Int64"), "ts_ms": [newest]})


#: q5's per-window state and output. The state's auction ids and counts are int64 arrays as
#: bytes: Spark 4.3's Python worker fails to read a state schema with an array field ("KeyError:
#: 'elementType'").
HOTTEST_STATE = "auctions binary, counts binary, ts_ms bigint"
INT64 = "<i8"
HOTTEST_OUTPUT = "window bigint, count bigint, auctions array<bigint>, ts_ms bigint"


def hottest_auctions(key: tuple[int], batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """q5 per hopping window (the key: its start, ms), the function of ``applyInPandasWithState``:
    the window's bid count per auction so far is its state; on every batch that brings the window
    bids, one row with its largest count and the auctions that have it. Once the watermark passes
    the window's end the state is dropped (an event-time timeout), and bids that come for it later
    are dropped as late, as Kafka Streams' window grace of 0 drops them."""
    (window,) = key
    end = int(window) + WINDOW_MS
    if state.hasTimedOut:
        state.remove()
        return
    if end <= state.getCurrentWatermarkMs():
        return
    bids = pd.concat(list(batches), ignore_index=True)
    counts = bids["auction"].value_counts()
    newest = int(bids["ts_ms"].max())
    if state.exists:
        auctions, saved, saved_newest = state.get
        saved_counts = pd.Series(np.frombuffer(saved, INT64), index=np.frombuffer(auctions, INT64))
        counts = counts.add(saved_counts, fill_value=0).astype("int64")
        newest = max(newest, int(saved_newest))
    state.update((counts.index.to_numpy(INT64).tobytes(), counts.to_numpy(INT64).tobytes(), newest))
    state.setTimeoutTimestamp(end)
    top = int(counts.max())
    yield pd.DataFrame({"window": [int(window)], "count": [top],
                        "auctions": [sorted(counts.index[counts == top].tolist())], "ts_ms": [newest]})


def plan(spark: SparkSession, query: str, bootstrap: str, prefix: str) -> Plan:
    def read(kind: str) -> DataFrame:
        return events(spark, bootstrap, f"{prefix}-{kind}", kind)

    if query in PERSON_AUCTION_QUERIES:
        return PERSON_AUCTION_QUERIES[query](read("person"), read("auction"))
    if query in AUCTION_BID_QUERIES:
        return AUCTION_BID_QUERIES[query](read("auction"), read("bid"))
    return BID_QUERIES[query](read("bid"))


def start(spark: SparkSession, args: argparse.Namespace, prefix: str, output: str, checkpoint: Path,
          name: str) -> StreamingQuery:
    """Query `args.query` over `prefix`'s topics, written to `output` with each record's ``ts`` header."""
    p = plan(spark, args.query, args.bootstrap, prefix)
    ts_header = F.struct(F.lit("ts").alias("key"), F.col("ts_ms").cast("string").cast("binary").alias("value"))
    return (p.rows.select("key", "value", F.array(ts_header).alias("headers"))
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("topic", output)
            .option("checkpointLocation", str(checkpoint))
            .outputMode(p.output_mode)
            .queryName(name)
            .trigger(processingTime=f"{args.trigger_ms} milliseconds")
            .start())


# -- the consumer group the harness watches ------------------------------------------------------


class OffsetCommitter(StreamingQueryListener):
    """Commits the end offsets of each finished batch of query `name` to consumer group `group`.

    Spark's Kafka source keeps its offsets in the checkpoint and commits none to Kafka, while
    bench/nexmark.py knows the input is processed when the app's group has committed the end of
    every input partition. A batch's progress event comes once the batch is committed to the
    checkpoint, so after its output is written."""

    def __init__(self, bootstrap: str, group: str, name: str) -> None:
        from confluent_kafka.admin import AdminClient

        self._admin = AdminClient({"bootstrap.servers": bootstrap})
        self.group, self.name = group, name
        self._last: list[tuple[str, int, int]] = []

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        progress = event.progress
        if progress.name != self.name:
            return
        ends = sorted((topic, int(partition), offset) for source in progress.sources
                      for topic, offsets in json.loads(source.endOffset or "{}").items()
                      for partition, offset in offsets.items())
        if not ends or ends == self._last:
            return
        try:
            request = ConsumerGroupTopicPartitions(self.group, [TopicPartition(t, p, o) for t, p, o in ends])
            for future in self._admin.alter_consumer_group_offsets([request]).values():
                future.result(30)
            self._last = ends
        except Exception as e:  # noqa: BLE001 - the next batch commits again
            log(f"committing batch {progress.batchId}'s offsets to group {self.group} failed: {e}")

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


# -- the program -------------------------------------------------------------------------------------


def warm_up(spark: SparkSession, args: argparse.Namespace, partitions: int) -> float:
    """Run the query to its end over --warmup-events events of its own topics, then stop it: the
    JVM's code paths and the Python workers are ready before the measured query starts. Returns
    the seconds it took."""
    started = time.monotonic()
    prefix, output = f"{args.output_prefix}-warm-in", f"{args.output_prefix}-warm-{args.query}"
    subprocess.run([str(GENERATOR), "generate", "--bootstrap", args.bootstrap, "--prefix", prefix,
                    "--events", str(args.warmup_events), "--rate", str(WARMUP_EVENT_RATE),
                    "--partitions", str(partitions)], check=True, stdout=subprocess.DEVNULL)
    create_topics(args.bootstrap, [output], partitions)
    query = start(spark, args, prefix, output, Path(args.state_dir) / "warmup", f"{args.app_id}-warmup")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return time.monotonic() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in ("--bootstrap", "--prefix", "--output-prefix", "--app-id", "--state-dir"):
        ap.add_argument(name, required=True)
    ap.add_argument("--query", required=True, choices=QUERIES)
    ap.add_argument("--warmup-events", type=int, default=WARMUP_EVENTS, help="0: no warm-up query")
    ap.add_argument("--trigger-ms", type=int, default=100)
    args = ap.parse_args()

    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # q4's and q5's Python workers need this venv's pandas
    kind = "person" if args.query in PERSON_AUCTION_QUERIES else "bid"
    partitions = input_partitions(args.bootstrap, f"{args.prefix}-{kind}")
    session = argparse.Namespace(checkpoint=str(state), mode="microbatch", master="", cores=1)
    spark = spark_session(session, partitions)
    closed = threading.Event()

    def wait_for_stdin_to_close() -> None:
        sys.stdin.read()
        closed.set()

    threading.Thread(target=wait_for_stdin_to_close, daemon=True, name="stdin").start()
    committer = OffsetCommitter(args.bootstrap, args.app_id, args.app_id)
    spark.streams.addListener(committer)
    try:
        if args.warmup_events:
            took = warm_up(spark, args, partitions)
            log(f"{args.query}: warm-up query over {args.warmup_events} events done in {took:.1f} s")
        started = time.monotonic()
        query = start(spark, args, args.prefix, f"{args.output_prefix}-{args.query}", state / "checkpoint",
                      args.app_id)
        log(f"{args.query}: -> RUNNING (local[1], {partitions} shuffle partitions, trigger {args.trigger_ms} ms)")
        while not closed.wait(0.1):
            if query.exception() is not None:
                log(f"{args.query}: query failed: {query.exception()}")
                print(json.dumps({"query": args.query, "error": str(query.exception())}), flush=True)
                return 1
        seconds = time.monotonic() - started
        progress = list(query.recentProgress)
        query.stop()
        durations = [p.durationMs.get("triggerExecution", 0) for p in progress]
        print(json.dumps({"query": args.query, "seconds": round(seconds, 3), "batches": len(progress),
                          "max_batch_ms": max(durations, default=0)}), flush=True)
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
