"""Pipelines of Eddy's own record steps that tests/runtime/test_record_steps_on_kafka.py runs (the driver
ships this module to executors by value)."""

from __future__ import annotations

from eddy_runtime.dsl.pipeline import Topology


def numbers(value: str) -> list[int]:
    """ "1,2" -> [1, 2]; int("x") raises ValueError: a bad record."""
    return [int(n) for n in value.split(",")]


def totals(topology: Topology, input_topic: str, output_topic: str) -> None:
    """Sum per key of the comma-separated numbers of each value, all in one sub-topology."""
    topology.stream(input_topic).flat_map_values(numbers).group_by_key().reduce(
        "sum", name="totals", value_serde="int64").to(output_topic)


def shout(value: str) -> str:
    if value == "boom":
        raise ValueError("cannot shout boom")
    return value.upper()


def shouted(topology: Topology, input_topic: str, output_topic: str) -> None:
    """A stateless sub-topology: upper-cased values, except the empty ones."""
    topology.stream(input_topic).filter_not(lambda key, value: value == "").map_values(shout).to(output_topic)


def mixed(topology: Topology, input_topic: str, output_topic: str) -> None:
    """A record step after a DataFrame step in one sub-topology: rejected when the app starts."""
    topology.stream(input_topic).transform(lambda df: df).map_values(shout).to(output_topic)



def labelled_totals(topology: Topology, input_topic: str, output_topic: str) -> None:
    """`totals`, then record steps on the sums: a label, and keys starting with "hidden" left out."""
    topology.stream(input_topic).flat_map_values(numbers).group_by_key().reduce(
        "sum", name="totals", value_serde="int64").to_stream() \
        .map_values(lambda total: f"{total} in total").filter_not(lambda key, _: key.startswith("hidden")) \
        .to(output_topic)


def sized_counts(topology: Topology, input_topic: str, output_topic: str) -> None:
    """Numbers per key, re-keyed after the count by "many" (more than one) or "one", and counted."""
    topology.stream(input_topic).flat_map_values(numbers).group_by_key().count(name="counts").to_stream() \
        .group_by(lambda key, n: "many" if n > 1 else "one", name="by-size").count(name="sizes") \
        .to(output_topic)


def routed(topology: Topology, input_topic: str, output_topic: str) -> None:
    """split(): values starting with "!" to `<output>-alerts` upper-cased, the other non-empty ones
    to `<output>`, the empty ones nowhere; every value is also counted per key (written before
    the count: the raw copy sees the records)."""
    stream = topology.stream(input_topic)
    stream.to(f"{output_topic}-raw")
    branches = stream.split()
    branches.branch(lambda key, value: value.startswith("!")).map_values(str.upper).to(f"{output_topic}-alerts")
    branches.branch(lambda key, value: value != "").to(output_topic)


def merged_counts(topology: Topology, input_topic: str, output_topic: str) -> None:
    """Numbers per key from two topics (`input_topic` and `<input_topic>-more`), merged, counted."""
    first = topology.stream(input_topic).flat_map_values(numbers)
    second = topology.stream(f"{input_topic}-more").flat_map_values(numbers)
    first.merge(second, name="all").group_by_key().count(name="counts").to(output_topic)


def merged_in_place_counts(topology: Topology, input_topic: str, output_topic: str) -> None:
    """As `merged_counts`, with the two topics merged as read (one sub-topology reads both) and
    the numbers taken after the merge."""
    first, second = topology.stream(input_topic), topology.stream(f"{input_topic}-more")
    first.merge(second, name="all").flat_map_values(numbers).group_by_key().count(name="counts").to(output_topic)
