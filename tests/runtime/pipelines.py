"""Pipelines the runtime's integration tests run (the driver ships this module to executors by value)."""

from __future__ import annotations

from pyspark.sql import functions as F

from eddy_runtime.dsl.pipeline import Topology, tumbling, until_window_closes


def clicks_per_window(topology: Topology, input_topic: str, output_topic: str) -> None:
    """Clicks per user and 10 s window, 5 s grace."""
    windows = tumbling("10s", grace="5s")
    topology.stream(input_topic).group_by_key().windowed_by(windows).count(name="clicks-per-10s").to(output_topic)


def final_clicks_one_window_buffered(topology: Topology, input_topic: str, output_topic: str) -> None:
    """Final clicks per user and minute, at most one window waiting in the suppression buffer."""
    counts = topology.stream(input_topic).group_by_key().windowed_by(tumbling("1m")).count(name="clicks")
    counts.suppress(until_window_closes(max_records=1)).to(output_topic)


def clicks_with_city(topology: Topology, clicks_topic: str, users_topic: str, output_topic: str) -> None:
    """Each click with its user's city (left join: null for unknown users)."""
    users = topology.table(users_topic, name="users")
    topology.stream(clicks_topic).join(users, how="left", right_name="city").to(
        output_topic, value=["value", "city"], value_serde="json")


def add_amounts(totals: int, values: dict[str, list[str]]) -> int:
    return totals + sum(int(n) for n in values["n"])  # int("x") raises: a user-function error


def totals(topology: Topology, input_topic: str, output_topic: str) -> None:
    """Sum of the JSON values' ``n`` per key; invalid JSON and non-numeric ``n`` are bad records."""
    amounts = topology.stream(input_topic, value_serde="json").transform(
        lambda df: df.select("key", F.get_json_object("value", "$.n").alias("n"), "offset", "timestamp"))
    amounts.group_by_key().aggregate(lambda: 0, lambda key, values, agg: add_amounts(agg, values), name="totals",
                                     value_serde="int64").to(output_topic)


def shuffles(topology: Topology, input_topic: str, output_topic: str) -> None:
    topology.stream(input_topic).transform(lambda df: df.groupBy("key").count()).to(output_topic, value="count")


def shout(topology: Topology, input_topic: str, output_topic: str) -> None:
    """Upper-cases values in a Python UDF that fails on the value "boom"."""

    @F.udf("string")
    def upper(value):  # no type hints: Spark would try to infer a pandas UDF from them
        if value == "boom":
            raise ValueError("cannot shout boom")
        return value.upper()

    topology.stream(input_topic).transform(
        lambda df: df.select("key", upper("value").alias("value"), "timestamp")).to(output_topic)


def word_counts(topology: Topology, input_topic: str, output_topic: str) -> None:
    """One word per record, re-keyed by word and counted: Eddy's own steps only (no DataFrame step),
    so both sub-topologies run on the continuous path."""
    topology.stream(input_topic).group_by("value", name="words").count(name="counts").to(output_topic)


class FirstSeen:
    """A user's first visit only; every minute of stream time, how many users were seen so far;
    every 200 ms of wall-clock time, a heartbeat (a `Processor` by duck typing)."""

    def init(self, context) -> None:
        from eddy_runtime.dsl.processors import STREAM_TIME, WALL_CLOCK_TIME

        self.context = context
        self.seen = context.store("seen")
        context.schedule(60_000, STREAM_TIME, self.tick)
        context.schedule(200, WALL_CLOCK_TIME, lambda now: context.forward("beat", "1"))

    def process(self, record) -> None:
        if self.seen.get(record.key) is None:
            self.seen.put(record.key, record.timestamp)
            self.seen.put("count", (self.seen.get("count") or 0) + 1)
            self.context.forward(record.key, record.value)

    def tick(self, timestamp: int) -> None:
        self.context.forward("tick", str(self.seen.get("count") or 0))

    def close(self) -> None:
        pass


def first_seen(topology: Topology, input_topic: str, output_topic: str) -> None:
    topology.stream(input_topic).process(FirstSeen, stores=["seen"], name="first-seen").to(output_topic)
