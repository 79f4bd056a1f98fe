"""The pipeline graph: one frozen node per call of the pipeline API (dsl/pipeline.py).

A node knows the step it reads from (`Node.parent`) and what the user asked of it, nothing
else; dsl/compiler.py walks the graph from its sinks (`ToTopic`) into sub-topologies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from eddy_runtime.dsl.processors import Processor
from eddy_runtime.dsl.record_steps import RecordStep
from eddy_runtime.dsl.time_windows import JoinWindows, SessionWindows, Suppressed, TimeWindows
from eddy_runtime.state import StoreSpec

__all__ = [
    "Aggregate", "GroupBy", "Join", "Merge", "Node", "Process", "Record", "Source", "StreamJoin", "Suppress",
    "TableJoin", "TableSource", "ToStream", "ToTopic", "Transform",
]


@dataclass(frozen=True, eq=False)
class Node:
    """A step of the pipeline; `parent` is the step it reads from (None for a source)."""

    parent: Node | None


@dataclass(frozen=True, eq=False)
class Source(Node):
    topic: str
    key_serde: str
    value_serde: str


@dataclass(frozen=True, eq=False)
class TableSource(Node):
    topic: str
    key_serde: str
    value_serde: str
    store: str


@dataclass(frozen=True, eq=False)
class Transform(Node):
    fn: Callable[[Any], Any]
    name: str


@dataclass(frozen=True, eq=False)
class Record(Node):
    step: RecordStep


@dataclass(frozen=True, eq=False)
class Process(Node):
    """A user `Processor` (dsl/processors.py) run record by record, with its own key-value stores."""

    factory: Callable[[], Processor]
    #: the processor's key-value stores
    stores: tuple[StoreSpec, ...]
    name: str


@dataclass(frozen=True, eq=False)
class GroupBy(Node):
    #: a column name, a key selector (its function (key, value) -> key), a pyspark Column, or None
    #: for `group_by_key` (the ``key`` column, no repartition)
    key: Any
    name: str
    key_serde: str
    partitions: int | None


@dataclass(frozen=True, eq=False)
class Aggregate(Node):
    kind: Literal["count", "reduce", "aggregate"]
    store: str
    value_serde: str
    windows: TimeWindows | None = None
    #: reduce: "sum" / "min" / "max" or a callable (a, b) -> c; aggregate: (key, values, agg) -> agg
    reducer: str | Callable[[Any, Any], Any] | None = None
    column: str | None = None
    initializer: Callable[[], Any] | None = None
    adder: Callable[[Any, dict[str, list[Any]], Any], Any] | None = None
    #: session windows (then `windows` is None), and an aggregate's merger (key, agg, agg) -> agg
    session_windows: SessionWindows | None = None
    merger: Callable[[Any, Any, Any], Any] | None = None


@dataclass(frozen=True, eq=False)
class Suppress(Node):
    """A windowed aggregation's table (`parent`) seen through a suppression buffer kept in `store`."""

    suppressed: Suppressed
    store: str


@dataclass(frozen=True, eq=False)
class Join(Node):
    table: TableSource
    how: Literal["inner", "left"]
    right_name: str
    #: joiner(stream value, table value) -> the joined record's value; None: the table's value
    #: goes beside the stream's, in column `right_name`
    joiner: Callable[[Any, Any], Any] | None = None


@dataclass(frozen=True, eq=False)
class StreamJoin(Node):
    """A windowed join with another stream read straight from its topic (`other`)."""

    other: Source
    joiner: Callable[[Any, Any], Any]
    windows: JoinWindows
    left_store: str
    right_store: str
    how: Literal["inner", "left", "outer"] = "inner"
    #: left and outer joins: the records still without a partner (Kafka Streams' outer join store)
    outer_store: str = ""


@dataclass(frozen=True, eq=False)
class TableJoin(Node):
    """Two source tables joined on their keys (`parent` is the left one)."""

    other: TableSource
    joiner: Callable[[Any, Any], Any]
    how: Literal["inner", "left", "outer"]


@dataclass(frozen=True, eq=False)
class Merge(Node):
    """`parent`'s records and `other`'s in one stream: read in place when both are topics as read
    (dsl/compiler.py's `_merges_in_place`), else through the internal topic
    ``<app>-<name>-repartition``, keyed as they are."""

    other: Node
    name: str
    key_serde: str
    partitions: int | None
    #: may be read in place (`Stream.merge`'s `in_place`)
    in_place: bool = True


@dataclass(frozen=True, eq=False)
class ToStream(Node):
    pass


@dataclass(frozen=True, eq=False)
class ToTopic(Node):
    topic: str
    key_serde: str | None
    value_serde: str | None
    key: str
    value: str | tuple[str, ...]
