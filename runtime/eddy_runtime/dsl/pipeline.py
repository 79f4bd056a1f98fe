"""The pipeline API: what a user's ``build(topology)`` calls to describe a stream app.

Kafka Streams' vocabulary; docs/pipelines.md is the reference. The word count::

    def build(topology):
        lines = topology.stream("text", value_serde="string")
        words = lines.flat_map_values(lambda line: line.lower().split())
        words.group_by(lambda key, word: word).count(name="counts").to("word-counts")

- `Topology.stream` reads a topic: rows with ``key``, ``value``, ``topic``, ``partition``,
  ``offset``, ``timestamp``.
- Record steps (`flat_map_values`, `map_values`, `filter`, `filter_not`, `flat_map`, `map`;
  dsl/record_steps.py) run in the executor's task runner, without Spark. `Stream.transform` applies a
  PySpark DataFrame -> DataFrame function instead (no shuffle); one sub-topology uses one kind.
- `group_by` re-keys (a column name, a function (key, value) -> key, or a pyspark Column) through
  ``<app>-<name>-repartition``; `group_by_key` keeps the key. `count` / `reduce` / `aggregate`,
  windowed with `windowed_by(tumbling(...))`, `hopping(...)` or `session_windows(...)`, keep their
  state in RocksDB stores with changelogs and return a `Table` whose `to(topic)` writes each key's
  new value once per batch.
- `Table.suppress(until_window_closes())` lets a windowed table's final results through only
  (or, with `until_time_limit(...)`, each key's newest update after a wait): Kafka Streams' ``suppress``.
- `Stream.join(table)` joins a stream with a `Topology.table` from a co-partitioned compacted topic.

This module is the user's entry point (``from eddy_runtime.dsl.pipeline import Topology, tumbling``);
it only records what the user asked for, as a graph of frozen nodes (dsl/graph.py);
dsl/compiler.py turns it into sub-topologies and tasks, and the runtime executes those.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from eddy_runtime.dsl.branches import BranchedStream
from eddy_runtime.dsl.errors import PipelineError
from eddy_runtime.dsl.graph import (
    Aggregate,
    GroupBy,
    Join,
    Merge,
    Node,
    Process,
    Record,
    Source,
    StreamJoin,
    Suppress,
    TableJoin,
    TableSource,
    ToStream,
    ToTopic,
    Transform,
)
from eddy_runtime.dsl.names import (
    KEY_SERDES,
    REDUCE_OPS,
    VALUE_SERDES,
    check_name,
    check_serde,
    is_generated_name,
)
from eddy_runtime.dsl.processors import Processor
from eddy_runtime.dsl.record_steps import RecordStep, RecordSteps, TableValues, is_key_selector
from eddy_runtime.dsl.time_windows import (
    JoinWindows,
    SessionWindows,
    Suppressed,
    TimeWindows,
    duration_ms,
    hopping,
    join_windows,
    session_windows,
    tumbling,
    until_time_limit,
    until_window_closes,
)
from eddy_runtime.state import StoreSpec

__all__ = [
    "GroupedStream", "JoinWindows", "PipelineError", "SessionWindowedStream", "SessionWindows", "Stream",
    "Suppressed", "Table", "TimeWindows", "Topology", "WindowedStream", "duration_ms", "hopping", "is_generated_name",
    "join_windows", "session_windows", "tumbling", "until_time_limit", "until_window_closes",
]

@dataclass
class Topology:
    """The builder a user's ``build(topology)`` receives."""

    sources: list[Source] = field(default_factory=list)
    sinks: list[ToTopic] = field(default_factory=list)
    _names: set[str] = field(default_factory=set)
    _counter: int = 0

    def _name(self, given: str | None, prefix: str) -> str:
        if given is None:
            while f"{prefix}-{self._counter}" in self._names:
                self._counter += 1
            given = f"{prefix}-{self._counter}"
            self._counter += 1
        check_name(given, prefix)
        if given in self._names:
            raise PipelineError(f"the name {given!r} is used twice; names of stores and repartition topics are unique")
        self._names.add(given)
        return given

    def stream(self, topic: str, *, key_serde: str = "string", value_serde: str = "string") -> Stream:
        """Records of `topic` as a stream; serdes: string, bytes, int64, json (text, checked)."""
        source = Source(None, topic, check_serde(key_serde, KEY_SERDES, "key serde"),
                        check_serde(value_serde, VALUE_SERDES, "value serde"))
        self.sources.append(source)
        return Stream(self, source)

    def table(self, topic: str, *, key_serde: str = "string", value_serde: str = "string",
              name: str | None = None) -> Table:
        """A table materialized from a (compacted) topic, for stream-table joins.

        The topic must have as many partitions as the stream joined with it, keyed the same way.
        """
        node = TableSource(None, topic, check_serde(key_serde, KEY_SERDES, "key serde"),
                           check_serde(value_serde, VALUE_SERDES, "value serde"), self._name(name, "table"))
        return Table(self, node, key_serde, value_serde)


@dataclass(frozen=True)
class Stream(RecordSteps):
    """A stream of records (rows of a batch and task)."""

    topology: Topology
    node: Node

    def _after_stateful(self) -> bool:
        n: Node | None = self.node
        while n is not None:
            if isinstance(n, Aggregate | Join | ToStream | StreamJoin | TableJoin | Suppress | Process):
                return True
            n = n.parent
        return False

    def _record(self, step: RecordStep) -> Stream:
        return Stream(self.topology, Record(self.node, step))

    def split(self, name: str = "split") -> BranchedStream[Stream]:
        """Route each record to the first branch whose predicate holds (Kafka Streams' ``split()``):
        ``b = stream.split(); big = b.branch(lambda k, v: v > 9); rest = b.default_branch()``. Each
        branch goes on with record steps and ends in ``to()`` or ``group_by(...)``."""
        return BranchedStream(self, name)

    def transform(self, fn: Callable[[Any], Any], name: str | None = None) -> Stream:
        """Apply ``fn(DataFrame) -> DataFrame``; it must not shuffle (use `group_by` to re-key)."""
        if not callable(fn):
            raise PipelineError(f"transform needs a function DataFrame -> DataFrame, got {fn!r}")
        if self._after_stateful():
            raise PipelineError(
                "transform after a stateful step (count, aggregate, join...) is not supported in the same "
                "sub-topology: write the result to a topic with to() and read it with topology.stream()"
            )
        return Stream(self.topology, Transform(self.node, fn, name or str(getattr(fn, "__name__", "transform"))))

    def process(self, factory: Callable[[], Processor], *, stores: Sequence[str | tuple[str, str, str]] = (),
                name: str | None = None) -> Stream:
        """Run a Kafka Streams-style `Processor` (eddy_runtime.dsl.processors) on each record: it gets
        the task's `stores` (names, or (name, key serde, value serde); JSON keys and values by
        default), may forward any number of records, and may schedule punctuations on stream time
        or wall-clock time. `factory()` makes one processor per task (a `Processor` subclass
        works). The stateful step of its sub-topology: records stay on their partition."""
        if not callable(factory):
            raise PipelineError(f"process needs a processor factory (e.g. a Processor subclass), got {factory!r}")
        if self._after_stateful():
            raise PipelineError("one stateful step per sub-topology: group_by before process()")
        specs = []
        for s in stores:
            store, key_serde, value_serde = (s, "json", "json") if isinstance(s, str) else s
            specs.append(StoreSpec.key_value(check_name(store, "store"),
                                             check_serde(key_serde, KEY_SERDES, "store key serde"),
                                             check_serde(value_serde, VALUE_SERDES, "store value serde")))
        if len({spec.name for spec in specs}) != len(specs):
            raise PipelineError(f"process() stores must have distinct names, got {[spec.name for spec in specs]}")
        base = self.topology._name(name, "process")
        return Stream(self.topology, Process(self.node, factory, tuple(specs), base))

    def group_by(self, key: Any, *, name: str | None = None, key_serde: str = "string",
                 partitions: int | None = None) -> GroupedStream:
        """Re-key through ``<app>-<name>-repartition`` by a column name, a function (key, value) -> key
        (Kafka Streams' ``groupBy``, run in the task runner) or a pyspark Column (a DataFrame step)."""
        if key is None:
            raise PipelineError("group_by needs a column or a function (key, value) -> key; "
                                "group_by_key() keeps the key")
        if self._after_stateful() and not isinstance(key, str) and not is_key_selector(key):
            raise PipelineError("after a stateful step, group_by takes a column name or a function "
                                "(key, value) -> key, not a DataFrame expression")
        key = RecordStep("select_key", key) if is_key_selector(key) else key
        node = GroupBy(self.node, key, self.topology._name(name, "group-by"),
                       check_serde(key_serde, KEY_SERDES, "key serde"), partitions)
        return GroupedStream(self.topology, node, key_serde)

    def group_by_key(self, *, key_serde: str = "string") -> GroupedStream:
        """Group by the ``key`` column as it is: no repartition (the input is already keyed by it)."""
        node = GroupBy(self.node, None, "", check_serde(key_serde, KEY_SERDES, "key serde"), None)
        return GroupedStream(self.topology, node, key_serde)

    def join(self, table: Table | Stream, joiner: Callable[[Any, Any], Any] | None = None, *,
             how: Literal["inner", "left", "outer"] = "inner", right_name: str = "table_value",
             windows: JoinWindows | None = None, name: str | None = None) -> Stream:
        """Join each record with the table's value for its ``key``: the record's value becomes
        ``joiner(value, table value)`` (Kafka Streams' ``ValueJoiner``), or without a joiner the
        table's value goes beside it, in column `right_name`.

        inner drops records whose key the table lacks; left keeps them with a null table value
        (``joiner(value, None)``). A joiner that raises drops that record (logged, counted).
        With another stream and `windows` (`join_windows`): Kafka Streams' windowed join,
        ``joiner(left value, right value)`` for every pair of records of one key whose
        timestamps fit the windows (`StreamJoin`); `how` "left" also emits ``joiner(left, None)``
        for a left record that found no right one by the time its window closed (grace
        included), "outer" that and ``joiner(None, right)`` for such right records.
        """
        if isinstance(table, Stream):
            return self._join_stream(table, joiner, windows, how, name)
        if not isinstance(table.node, TableSource):
            raise PipelineError("join takes a table from topology.table(topic)")
        if joiner is not None and not callable(joiner):
            raise PipelineError(f"a stream-table join's joiner is a function (value, table value) -> value, "
                                f"got {joiner!r}")
        if how not in ("inner", "left"):
            raise PipelineError(f"join how must be 'inner' or 'left', got {how!r}")
        if self._after_stateful():
            raise PipelineError("one stateful step per sub-topology: group_by before joining again")
        return Stream(self.topology, Join(self.node, table.node, how, right_name, joiner))

    def merge(self, other: Stream, *, name: str | None = None, key_serde: str = "string",
              partitions: int | None = None, in_place: bool = True) -> Stream:
        """This stream's records and `other`'s in one stream (Kafka Streams' ``merge``). Two topics
        merged as read (no step between, used nowhere else, co-partitioned, both of `key_serde`
        and of one value serde, no ``transform`` after) are one sub-topology that reads both,
        unless `in_place` is False; otherwise both go through the internal topic
        ``<app>-<name>-repartition`` keyed by their ``key`` column (in `key_serde`), so the merged
        stream is a new sub-topology, partitioned by key. ``in_place=False`` keeps the topology an
        app compiled by a build from before 2026-11-30 runs (docs/pipelines.md, "Merging two
        streams")."""
        if not isinstance(other, Stream):
            raise PipelineError(f"merge takes a stream, got {type(other).__name__}")
        if other.topology is not self.topology:
            raise PipelineError("merge takes a stream of the same topology")
        node = Merge(self.node, other.node, self.topology._name(name, "merge"),
                     check_serde(key_serde, KEY_SERDES, "key serde"), partitions, in_place)
        return Stream(self.topology, node)

    def _join_stream(self, other: Stream, joiner: Callable[[Any, Any], Any] | None, windows: JoinWindows | None,
                     how: str, name: str | None) -> Stream:
        if not isinstance(other.node, Source):
            raise PipelineError("a windowed join takes the other stream as read with topology.stream(topic), "
                                "before any step (write a changed stream to a topic and read it back)")
        if not isinstance(windows, JoinWindows):
            raise PipelineError("a join of two streams needs windows=join_windows(difference, grace)")
        if not callable(joiner):
            raise PipelineError(f"a join of two streams needs a joiner (left, right) -> value, got {joiner!r}")
        if how not in ("inner", "left", "outer"):
            raise PipelineError(f"a join of two streams is inner, left or outer, got how={how!r}")
        if self._after_stateful():
            raise PipelineError("one stateful step per sub-topology: group_by before joining again")
        base = self.topology._name(name, "join")
        node = StreamJoin(self.node, other.node, joiner, windows, f"{base}-this", f"{base}-other", how,  # type: ignore[arg-type]
                          f"{base}-outer" if how != "inner" else "")
        return Stream(self.topology, node)

    def to(self, topic: str, *, key_serde: str | None = "string", value_serde: str | None = "string",
           key: str = "key", value: str | Sequence[str] = "value") -> None:
        """Write records to `topic`: column `key`, and column `value` (or several, as a JSON object)."""
        value_cols = value if isinstance(value, str) else tuple(value)
        if key_serde is not None:
            check_serde(key_serde, KEY_SERDES, "key serde")
        if value_serde is not None:
            check_serde(value_serde, VALUE_SERDES, "value serde")
        if not isinstance(value_cols, str) and value_serde not in (None, "json"):
            raise PipelineError("several value columns are written as a JSON object: use value_serde='json'")
        sink = ToTopic(self.node, topic, key_serde, value_serde, key, value_cols)
        self.topology.sinks.append(sink)


@dataclass(frozen=True)
class GroupedStream:
    """A stream grouped by key, ready for an aggregation."""

    topology: Topology
    node: Node
    key_serde: str
    windows: TimeWindows | None = None
    session_windows: SessionWindows | None = None

    def windowed_by(self, windows: TimeWindows | SessionWindows) -> WindowedStream:
        """Aggregate per key and time window (`tumbling`, `hopping`) or session (`session_windows`)."""
        if isinstance(windows, SessionWindows):
            return SessionWindowedStream(self.topology, self.node, self.key_serde, None, windows)
        if not isinstance(windows, TimeWindows):
            raise PipelineError("windowed_by takes tumbling(...), hopping(...) or session_windows(...)")
        return WindowedStream(self.topology, self.node, self.key_serde, windows)

    def _aggregate(self, **kw: Any) -> Table:
        store = self.topology._name(kw.pop("name"), kw["kind"])
        node = Aggregate(self.node, store=store, windows=self.windows, session_windows=self.session_windows, **kw)
        windowed = self.windows is not None or self.session_windows is not None
        return Table(self.topology, node, self.key_serde, node.value_serde, windowed=windowed)

    def count(self, *, name: str | None = None) -> Table:
        """Records per key (int64)."""
        return self._aggregate(kind="count", name=name, value_serde="int64")

    def reduce(self, reducer: str | Callable[[Any, Any], Any], *, column: str = "value", name: str | None = None,
               value_serde: str = "json") -> Table:
        """Combine `column` per key: "sum", "min", "max" (vectorized) or a function (a, b) -> c."""
        if isinstance(reducer, str) and reducer not in REDUCE_OPS:
            raise PipelineError(f"reduce op {reducer!r} is not one of {', '.join(REDUCE_OPS)} (or a function)")
        if not isinstance(reducer, str) and not callable(reducer):
            raise PipelineError("reduce takes 'sum', 'min', 'max' or a function (a, b) -> c")
        serde = check_serde(value_serde, VALUE_SERDES, "value serde")
        return self._aggregate(kind="reduce", name=name, value_serde=serde, reducer=reducer, column=column)

    def aggregate(self, initializer: Callable[[], Any], adder: Callable[[Any, dict[str, list[Any]], Any], Any], *,
                  name: str | None = None, value_serde: str = "json") -> Table:
        """Fold each key's records of a batch into its aggregate, one call per key and batch.

        ``adder(key, values, aggregate)`` gets the key, ``values`` (column name -> the list of
        that key's values in this batch, in offset order) and the current aggregate (from
        ``initializer()`` for a new key), and returns the new aggregate.
        """
        if not callable(initializer) or not callable(adder):
            raise PipelineError("aggregate takes initializer() -> agg and adder(key, values, agg) -> agg")
        return self._aggregate(kind="aggregate", name=name,
                               value_serde=check_serde(value_serde, VALUE_SERDES, "value serde"),
                               initializer=initializer, adder=adder)


@dataclass(frozen=True)
class WindowedStream(GroupedStream):
    """A grouped stream with time windows: `count`, `reduce` and `aggregate` per key and window."""


@dataclass(frozen=True)
class SessionWindowedStream(WindowedStream):
    """A grouped stream with session windows (Kafka Streams' ``SessionWindowedKStream``): `count`,
    `reduce` and `aggregate` per key and session. Records are taken one at a time, as sessions
    merge: `reduce`'s function and `aggregate`'s adder run once per record."""

    def aggregate(self, initializer: Callable[[], Any], adder: Callable[[Any, dict[str, list[Any]], Any], Any],
                  merger: Callable[[Any, Any, Any], Any] | None = None, *, name: str | None = None,
                  value_serde: str = "json") -> Table:
        """Fold each record into its session's aggregate: ``adder(key, values, aggregate)`` with
        ``values`` mapping each column to a one-element list (the record's value), as the
        unwindowed adder gets a batch's. When a record joins sessions, ``merger(key, agg, other)``
        folds each of them, oldest first, into ``initializer()`` before the adder runs (Kafka
        Streams' ``Merger``), so it is required."""
        if merger is None:
            raise PipelineError("aggregate over session windows needs a merger (key, agg1, agg2) -> agg: a record "
                                "within the gap of two sessions merges them (Kafka Streams' Merger)")
        if not callable(initializer) or not callable(adder) or not callable(merger):
            raise PipelineError("aggregate takes initializer() -> agg, adder(key, values, agg) -> agg and "
                                "merger(key, agg1, agg2) -> agg")
        return self._aggregate(kind="aggregate", name=name,
                               value_serde=check_serde(value_serde, VALUE_SERDES, "value serde"),
                               initializer=initializer, adder=adder, merger=merger)


@dataclass(frozen=True)
class Table:
    """A changelog stream of per-key values (the result of an aggregation, or a source table)."""

    topology: Topology
    node: Node
    key_serde: str
    value_serde: str
    windowed: bool = False

    def to(self, topic: str, *, key_serde: str | None = None, value_serde: str | None = None) -> None:
        """Write each updated key's new value to `topic`, once per key and batch.

        A windowed table's record key is the key followed by the window start (8 bytes,
        big-endian), as Kafka Streams' ``TimeWindowedSerializer`` writes it; a session-windowed
        one's, by the session end and start (8 bytes each), as ``SessionWindowedSerializer`` does,
        and a session merged into a newer one is written as a tombstone.
        """
        if isinstance(self.node, TableSource):
            raise PipelineError("a source table is already a topic; join it with a stream or a table")
        self.to_stream().to(topic, key_serde=key_serde or self.key_serde, value_serde=value_serde or self.value_serde)

    def join(self, other: Table, joiner: Callable[[Any, Any], Any], *, how: Literal["inner", "left", "outer"] = "inner",
             value_serde: str = "string") -> Table:
        """Kafka Streams' KTable-KTable join of two source tables on their keys (co-partitioned
        topics): every update of either side emits ``joiner(left, right)`` for its key (None for a
        side without a value: `left` and `outer` joins), or a tombstone when the join result goes
        away; its timestamp is the newer of the two sides'."""
        if not (isinstance(self.node, TableSource) and isinstance(other.node, TableSource)):
            raise PipelineError("join of two tables takes tables read with topology.table(topic); to join an "
                                "aggregation's result, write it to a topic with to() and read it with table()")
        if not callable(joiner):
            raise PipelineError(f"a table-table join needs a joiner (left, right) -> value, got {joiner!r}")
        if how not in ("inner", "left", "outer"):
            raise PipelineError(f"table join how must be 'inner', 'left' or 'outer', got {how!r}")
        if self.node.topic == other.node.topic:
            raise PipelineError(f"a table joined with itself ({self.node.topic!r})")
        node = TableJoin(self.node, other.node, joiner, how)
        return Table(self.topology, node, self.key_serde, check_serde(value_serde, VALUE_SERDES, "value serde"))

    def suppress(self, suppressed: Suppressed, *, name: str | None = None) -> Table:
        """The table's updates held back in a buffer (Kafka Streams' ``KTable.suppress``):
        `until_window_closes()` lets each window's (or session's) final result through once stream
        time reaches its end plus grace (plus the inactivity gap for sessions);
        `until_time_limit(wait)` each key's newest update `wait` after the key's first update was
        buffered. The buffer is a store of its own, ``name`` (default ``<aggregation
        store>-suppress``), with a changelog, so a restart or a failover neither loses nor repeats an
        emitted result. For windowed aggregations (time or session windows), before any ``filter`` or
        ``map_values``."""
        if not isinstance(suppressed, Suppressed):
            raise PipelineError("suppress takes until_window_closes(...) or until_time_limit(...)")
        node = self.node
        if not (isinstance(node, Aggregate) and (node.windows is not None or node.session_windows is not None)):
            raise PipelineError("suppress applies to a windowed aggregation's table (windowed_by(...).count(), "
                                "reduce or aggregate), before any filter or map_values: suppress first, then "
                                "filter or map_values the emitted results")
        store = self.topology._name(name if name is not None else f"{node.store}-suppress", "suppress")
        return Table(self.topology, Suppress(node, suppressed, store), self.key_serde, self.value_serde, self.windowed)

    def filter(self, fn: Callable[[Any, Any], Any]) -> Table:
        """The table of the keys for which ``fn(key, value)`` holds; a key that stops holding is
        deleted (a tombstone), as Kafka Streams' ``KTable.filter``."""
        return self._values(TableValues(fn, "filter"), self.value_serde)

    def filter_not(self, fn: Callable[[Any, Any], Any]) -> Table:
        """The table without the keys for which ``fn(key, value)`` holds (deleted when they start to)."""
        return self._values(TableValues(fn, "filter_not"), self.value_serde)

    def map_values(self, fn: Callable[[Any], Any], *, value_serde: str | None = None) -> Table:
        """The table of ``fn(value)`` per key; deletes stay deletes (Kafka Streams' ``KTable.mapValues``)."""
        return self._values(TableValues(fn, "map_values"), value_serde or self.value_serde)

    def _values(self, step: TableValues, value_serde: str) -> Table:
        if not callable(step.fn):
            raise PipelineError(f"{step.what} needs a function, got {step.fn!r}")
        node = Record(self.to_stream().node, RecordStep("table_values", step))
        return Table(self.topology, node, self.key_serde, check_serde(value_serde, VALUE_SERDES, "value serde"),
                     self.windowed)

    def to_stream(self) -> Stream:
        """The table's updates as a stream of (key, value) records (then `to` or `group_by`)."""
        if isinstance(self.node, TableSource):
            raise PipelineError("a source table is already a topic; stream the topic instead")
        return Stream(self.topology, ToStream(self.node))
